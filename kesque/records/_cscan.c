/*
 * The record framing scan of kesque.records.records, compiled.
 *
 * The produce path checks the framing of every record of every batch, as Kafka's
 * LogValidator does (DefaultRecord.readFrom). In Python that costs about a microsecond per
 * record; here a few nanoseconds. The Python version in records.py stays the reference and
 * the fallback when this module is not built; tests run both on the same inputs.
 *
 * scan(buf, pos, end, expected_count) -> (count, null_key, offsets_ok)
 * walk(buf, pos, end, expected_count) -> count      (length prefixes only)
 * columns(payload, count) -> the records of one batch as column buffers (see records.py,
 *     record_columns): the reader side of the Spark connector builds Arrow arrays from them
 *     without a Python object per record.
 * encode(key_col, value_col, rows) -> the records section of a batch for the given rows of
 *     two Arrow binary columns (see records.py, encode_columns): the writer side.
 * murmur2_partitions(key_col, n, partitions) -> int32 partition per row (-1: null key),
 *     Kafka's default partitioner.
 * map_keys(payload, count, base_offset, start, table, size, max_entries) -> (records, full, size):
 *     the log cleaner's offset map (a bytearray of 24-byte slots, see below): key -> offset for
 *     each keyed record at or past start, until it holds max_entries keys (full: a new key did
 *     not fit). Runs without the GIL.
 * retain(payload, count, base_offset, table, latest_offset, drop_tombstones) -> (records, kept,
 *     tombstone_kept): the records of one batch the cleaner keeps, verbatim (the rule is in
 *     kesque/storage/cleaner.py). Runs without the GIL.
 * Errors raise ValueError with Kafka's messages; the caller turns them into INVALID_RECORD.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* zig-zag varint of at most max_bytes bytes (5 for int, 10 for long), as Kafka's ByteUtils */
static int read_varint(const unsigned char *b, Py_ssize_t *p, Py_ssize_t lim, int max_bytes, int64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= lim)
            return -1; /* runs past the end */
        unsigned char c = b[(*p)++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            if (max_bytes == 5) {
                uint32_t u = (uint32_t)v;
                *out = (int64_t)(int32_t)((u >> 1) ^ (uint32_t)(-(int32_t)(u & 1)));
            } else {
                *out = (int64_t)((v >> 1) ^ (uint64_t)(-(int64_t)(v & 1)));
            }
            return 0;
        }
        shift += 7;
    }
    return -2; /* too long */
}

static PyObject *invalid(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyErr_FormatV(PyExc_ValueError, fmt, ap);
    va_end(ap);
    return NULL;
}

static PyObject *varint_error(int rc, long count)
{
    if (rc == -1)
        return invalid("Incorrect declared batch size, premature EOF reached");
    return invalid("Varint is too long in record %ld", count);
}

static int parse_args(PyObject *args, Py_buffer *view, Py_ssize_t *pos, Py_ssize_t *end, long *expected)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "Onnl", &obj, pos, end, expected))
        return -1;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (*pos < 0 || *end > view->len || *pos > *end) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "Incorrect declared batch size, premature EOF reached");
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    long expected;
    if (parse_args(args, &view, &pos, &end, &expected) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    long count = 0;
    int null_key = 0, offsets_ok = 1, rc;
    int64_t v, length, n, nh;
    PyObject *result = NULL;

    while (pos < end) {
        if ((rc = read_varint(b, &pos, end, 5, &length)) < 0) { varint_error(rc, count); goto done; }
        Py_ssize_t rec_end = pos + length;
        if (length <= 0 || rec_end > end) {
            invalid("record %ld has invalid length %lld", count, (long long)length);
            goto done;
        }
        Py_ssize_t p = pos + 1; /* attributes */
        if (p > rec_end) { invalid("Incorrect declared batch size, premature EOF reached"); goto done; }
        if ((rc = read_varint(b, &p, rec_end, 10, &v)) < 0) { varint_error(rc, count); goto done; } /* ts delta */
        if ((rc = read_varint(b, &p, rec_end, 5, &v)) < 0) { varint_error(rc, count); goto done; }  /* offset delta */
        if (v != count)
            offsets_ok = 0;
        if ((rc = read_varint(b, &p, rec_end, 5, &n)) < 0) { varint_error(rc, count); goto done; }  /* key size */
        if (n > 0)
            p += n;
        else if (n < 0)
            null_key = 1;
        if (p > rec_end) goto size_mismatch;
        if ((rc = read_varint(b, &p, rec_end, 5, &n)) < 0) { varint_error(rc, count); goto done; }  /* value size */
        if (n > 0)
            p += n;
        if (p > rec_end) goto size_mismatch;
        if ((rc = read_varint(b, &p, rec_end, 5, &nh)) < 0) { varint_error(rc, count); goto done; } /* headers */
        if (nh) {
            if (nh < 0 || nh > rec_end - p) {
                invalid("Found invalid number of record headers %lld in record %ld", (long long)nh, count);
                goto done;
            }
            for (int64_t h = 0; h < nh; h++) {
                if ((rc = read_varint(b, &p, rec_end, 5, &n)) < 0) { varint_error(rc, count); goto done; }
                if (n < 0) {
                    invalid("Invalid negative header key size %lld in record %ld", (long long)n, count);
                    goto done;
                }
                p += n;
                if (p > rec_end) goto size_mismatch;
                if ((rc = read_varint(b, &p, rec_end, 5, &n)) < 0) { varint_error(rc, count); goto done; }
                if (n > 0)
                    p += n;
                if (p > rec_end) goto size_mismatch;
            }
        }
        if (p != rec_end) {
        size_mismatch:
            invalid("record %ld: expected to read %lld bytes in record payload, but read %lld", count,
                    (long long)length, (long long)(p - pos));
            goto done;
        }
        pos = rec_end;
        count++;
    }
    if (count != expected) {
        invalid("batch declares %ld records but contains %ld", expected, count);
        goto done;
    }
    result = Py_BuildValue("(lOO)", count, null_key ? Py_True : Py_False, offsets_ok ? Py_True : Py_False);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    long expected;
    if (parse_args(args, &view, &pos, &end, &expected) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    long count = 0;
    int64_t length;
    int rc;
    PyObject *result = NULL;
    while (pos < end) {
        if ((rc = read_varint(b, &pos, end, 5, &length)) < 0) { varint_error(rc, count); goto done; }
        if (length <= 0) {
            invalid("record %ld has invalid length %lld", count, (long long)length);
            goto done;
        }
        pos += length;
        count++;
    }
    if (pos != end) {
        invalid("Invalid record size: the last record runs past the end of the batch");
        goto done;
    }
    if (count != expected) {
        invalid("batch declares %ld records but contains %ld", expected, count);
        goto done;
    }
    result = PyLong_FromLong(count);
done:
    PyBuffer_Release(&view);
    return result;
}


/* ---------------------------------------------------------------- columns */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} growbuf;

static int gb_reserve(growbuf *g, Py_ssize_t extra)
{
    if (g->len + extra <= g->cap)
        return 0;
    Py_ssize_t cap = g->cap ? g->cap : 256;
    while (cap < g->len + extra)
        cap *= 2;
    char *d = PyMem_Realloc(g->data, cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    g->data = d;
    g->cap = cap;
    return 0;
}

static int gb_put(growbuf *g, const void *src, Py_ssize_t n)
{
    if (gb_reserve(g, n) < 0)
        return -1;
    memcpy(g->data + g->len, src, n);
    g->len += n;
    return 0;
}

static PyObject *gb_bytes(growbuf *g)
{
    return PyBytes_FromStringAndSize(g->data ? g->data : "", g->len);
}

/* one nullable bytes field: validity bit, running int32 offset, data */
static int put_field(const unsigned char *b, Py_ssize_t *p, Py_ssize_t lim, long i, unsigned char *valid,
                     int32_t *offsets, growbuf *data, long count)
{
    int64_t n;
    int rc;
    if ((rc = read_varint(b, p, lim, 5, &n)) < 0) {
        varint_error(rc, count);
        return -1;
    }
    if (n >= 0) {
        if (n > lim - *p) {
            invalid("record %ld: a field runs past the end of the record", count);
            return -1;
        }
        if (data->len + n > INT32_MAX) {
            invalid("batch too large for one Arrow binary column");
            return -1;
        }
        valid[i >> 3] |= (unsigned char)(1u << (i & 7));
        if (gb_put(data, b + *p, n) < 0)
            return -1;
        *p += n;
    }
    offsets[i + 1] = (int32_t)data->len;
    return 0;
}

static PyObject *columns(PyObject *self, PyObject *args)
{
    PyObject *obj;
    long count;
    if (!PyArg_ParseTuple(args, "Ol", &obj, &count))
        return NULL;
    if (count < 0)
        return invalid("negative record count %ld", count);
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    Py_ssize_t nbits = (count + 7) / 8;
    PyObject *result = NULL;
    growbuf kd = {0}, vd = {0};
    int64_t *ts = PyMem_Calloc(count ? count : 1, sizeof(int64_t));
    int64_t *off = PyMem_Calloc(count ? count : 1, sizeof(int64_t));
    int32_t *ko = PyMem_Calloc(count + 1, sizeof(int32_t));
    int32_t *vo = PyMem_Calloc(count + 1, sizeof(int32_t));
    unsigned char *kv = PyMem_Calloc(nbits ? nbits : 1, 1);
    unsigned char *vv = PyMem_Calloc(nbits ? nbits : 1, 1);
    if (!ts || !off || !ko || !vo || !kv || !vv) {
        PyErr_NoMemory();
        goto done;
    }
    long i;
    for (i = 0; i < count && pos < end; i++) {
        int64_t length;
        int rc;
        if ((rc = read_varint(b, &pos, end, 5, &length)) < 0) { varint_error(rc, i); goto done; }
        if (length <= 0 || length > end - pos) {
            invalid("record %ld has invalid length %lld", i, (long long)length);
            goto done;
        }
        Py_ssize_t rec_end = pos + length;
        Py_ssize_t p = pos + 1; /* attributes */
        if ((rc = read_varint(b, &p, rec_end, 10, &ts[i])) < 0) { varint_error(rc, i); goto done; }
        if ((rc = read_varint(b, &p, rec_end, 5, &off[i])) < 0) { varint_error(rc, i); goto done; }
        if (put_field(b, &p, rec_end, i, kv, ko, &kd, i) < 0) goto done;
        if (put_field(b, &p, rec_end, i, vv, vo, &vd, i) < 0) goto done;
        pos = rec_end; /* headers are not columns here (the broker validated their framing) */
    }
    if (i != count) {
        invalid("batch declares %ld records but contains %ld", count, i);
        goto done;
    }
    PyObject *kdb = gb_bytes(&kd), *vdb = gb_bytes(&vd);
    result = Py_BuildValue("(ly#y#y#y#Ny#y#N)", count,
                           (const char *)ts, (Py_ssize_t)(count * sizeof(int64_t)),
                           (const char *)off, (Py_ssize_t)(count * sizeof(int64_t)),
                           (const char *)kv, nbits, (const char *)ko, (Py_ssize_t)((count + 1) * sizeof(int32_t)),
                           kdb, (const char *)vv, nbits, (const char *)vo,
                           (Py_ssize_t)((count + 1) * sizeof(int32_t)), vdb);
done:
    PyMem_Free(ts);
    PyMem_Free(off);
    PyMem_Free(ko);
    PyMem_Free(vo);
    PyMem_Free(kv);
    PyMem_Free(vv);
    PyMem_Free(kd.data);
    PyMem_Free(vd.data);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------- encode */

/* an Arrow binary column: (validity bitmap or None, int32 offsets, data, slice offset) */
typedef struct {
    Py_buffer valid, offsets, data;
    int has_valid, present;
    Py_ssize_t offset;
} bincol;

static void col_release(bincol *c)
{
    if (c->has_valid) PyBuffer_Release(&c->valid);
    if (c->present) {
        PyBuffer_Release(&c->offsets);
        PyBuffer_Release(&c->data);
    }
}

static int col_get(PyObject *obj, bincol *c)
{
    memset(c, 0, sizeof(*c));
    if (obj == Py_None)
        return 0; /* no column: every value null */
    PyObject *v, *o, *d;
    if (!PyArg_ParseTuple(obj, "OOOn", &v, &o, &d, &c->offset))
        return -1;
    if (v != Py_None) {
        if (PyObject_GetBuffer(v, &c->valid, PyBUF_SIMPLE) < 0) return -1;
        c->has_valid = 1;
    }
    if (PyObject_GetBuffer(o, &c->offsets, PyBUF_SIMPLE) < 0) { col_release(c); return -1; }
    if (PyObject_GetBuffer(d, &c->data, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&c->offsets); col_release(c); return -1; }
    c->present = 1;
    return 0;
}

/* value i of the column: 0 and (*p, *n) set, 1 when null, -1 out of bounds */
static int col_value(const bincol *c, Py_ssize_t i, const char **p, Py_ssize_t *n)
{
    if (!c->present)
        return 1;
    Py_ssize_t j = i + c->offset;
    if (j < 0 || (j + 2) * (Py_ssize_t)sizeof(int32_t) > c->offsets.len)
        return -1;
    if (c->has_valid) {
        if (j / 8 >= c->valid.len) return -1;
        if (!(((const unsigned char *)c->valid.buf)[j >> 3] >> (j & 7) & 1)) return 1;
    }
    const int32_t *off = (const int32_t *)c->offsets.buf;
    int32_t a = off[j], b = off[j + 1];
    if (a < 0 || b < a || b > c->data.len)
        return -1;
    *p = (const char *)c->data.buf + a;
    *n = b - a;
    return 0;
}

static Py_ssize_t put_uvarint(unsigned char *out, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) { out[n++] = (unsigned char)(v | 0x80); v >>= 7; }
    out[n++] = (unsigned char)v;
    return n;
}

static Py_ssize_t put_svarint(unsigned char *out, int64_t v)
{
    return put_uvarint(out, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static PyObject *encode(PyObject *self, PyObject *args)
{
    PyObject *kobj, *vobj, *robj;
    if (!PyArg_ParseTuple(args, "OOO", &kobj, &vobj, &robj))
        return NULL;
    bincol k, v;
    Py_buffer rows;
    if (col_get(kobj, &k) < 0) return NULL;
    if (col_get(vobj, &v) < 0) { col_release(&k); return NULL; }
    if (PyObject_GetBuffer(robj, &rows, PyBUF_SIMPLE) < 0) { col_release(&k); col_release(&v); return NULL; }
    PyObject *result = NULL;
    growbuf out = {0};
    Py_ssize_t n = rows.len / (Py_ssize_t)sizeof(int32_t);
    const int32_t *idx = (const int32_t *)rows.buf;
    unsigned char head[64];
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *kp = NULL, *vp = NULL;
        Py_ssize_t kn = -1, vn = -1;
        int rk = col_value(&k, idx[i], &kp, &kn), rv = col_value(&v, idx[i], &vp, &vn);
        if (rk < 0 || rv < 0) { invalid("row %ld is out of the columns' bounds", (long)idx[i]); goto done; }
        if (rk) kn = -1;
        if (rv) vn = -1;
        /* body: attributes, timestamp delta 0, offset delta i, key, value, 0 headers */
        Py_ssize_t h = 0;
        head[h++] = 0;
        head[h++] = 0;
        h += put_svarint(head + h, i);
        Py_ssize_t kh = put_svarint(head + h, kn);
        Py_ssize_t body = h + kh + (kn > 0 ? kn : 0);
        unsigned char vhead[16];
        Py_ssize_t vh = put_svarint(vhead, vn);
        body += vh + (vn > 0 ? vn : 0) + 1;
        unsigned char len[16];
        Py_ssize_t lh = put_svarint(len, body);
        if (gb_reserve(&out, lh + body) < 0) goto done;
        memcpy(out.data + out.len, len, lh); out.len += lh;
        memcpy(out.data + out.len, head, h + kh); out.len += h + kh;
        if (kn > 0) { memcpy(out.data + out.len, kp, kn); out.len += kn; }
        memcpy(out.data + out.len, vhead, vh); out.len += vh;
        if (vn > 0) { memcpy(out.data + out.len, vp, vn); out.len += vn; }
        out.data[out.len++] = 0;
    }
    result = gb_bytes(&out);
done:
    PyMem_Free(out.data);
    PyBuffer_Release(&rows);
    col_release(&k);
    col_release(&v);
    return result;
}

static int32_t murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < n4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) | ((uint32_t)data[i + 2] << 16) |
                     ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[n4 + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[n4 + 1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)data[n4]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *murmur2_partitions(PyObject *self, PyObject *args)
{
    PyObject *kobj;
    Py_ssize_t n;
    long parts;
    if (!PyArg_ParseTuple(args, "Onl", &kobj, &n, &parts))
        return NULL;
    if (parts <= 0 || n < 0)
        return invalid("bad partition count %ld or row count %ld", parts, (long)n);
    bincol k;
    if (col_get(kobj, &k) < 0) return NULL;
    PyObject *result = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
    if (!result) { col_release(&k); return NULL; }
    int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *kp = NULL;
        Py_ssize_t kn = 0;
        int rk = col_value(&k, i, &kp, &kn);
        if (rk < 0) { Py_DECREF(result); result = NULL; invalid("row %ld is out of the key column", (long)i); break; }
        out[i] = rk ? -1 : (int32_t)((uint32_t)(murmur2((const unsigned char *)kp, kn) & 0x7fffffff) % (uint32_t)parts);
    }
    col_release(&k);
    return result;
}

/* ---------------------------------------------------------------- log cleaner */

/* one record's framing: [start, end), offset delta, key (NULL if null), value null */
typedef struct {
    Py_ssize_t start, end;
    int64_t offset_delta;
    const unsigned char *key;
    int64_t key_len;
    int value_null;
} rec_view;

static int next_record_nogil(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, rec_view *r)
{
    int64_t length, v;
    r->start = *pos;
    if (read_varint(b, pos, end, 5, &length) < 0 || length <= 0 || length > end - *pos)
        return -1;
    Py_ssize_t p = *pos + 1;
    r->end = *pos + length;
    if (read_varint(b, &p, r->end, 10, &v) < 0 || read_varint(b, &p, r->end, 5, &r->offset_delta) < 0
        || read_varint(b, &p, r->end, 5, &r->key_len) < 0)
        return -1;
    r->key = NULL;
    if (r->key_len >= 0) {
        if (r->key_len > r->end - p)
            return -1;
        r->key = b + p;
        p += r->key_len;
    }
    if (read_varint(b, &p, r->end, 5, &v) < 0)
        return -1;
    r->value_null = v < 0;
    *pos = r->end;
    return 0;
}

/* The offset map of the log cleaner (Kafka's SkimpyOffsetMap): a caller-owned buffer of
 * slots of 24 bytes (two 64-bit halves of a 128-bit key hash, the offset; an empty slot holds
 * offset -1), open addressing with linear probing. Everything here runs without the GIL. */
static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
    return k;
}

static void key_hash(const unsigned char *p, int64_t n, uint64_t *h1, uint64_t *h2)
{
    uint64_t a = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, b = 0xC2B2AE3D27D4EB4FULL + (uint64_t)n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t k;
        memcpy(&k, p + i, 8);
        a = fmix64(a ^ k) * 0x87c37b91114253d5ULL;
        b = fmix64(b + k * 0x4cf5ad432745937fULL) ^ (b >> 29);
    }
    uint64_t tail = 0;
    for (int64_t j = 0; i + j < n; j++)
        tail |= (uint64_t)p[i + j] << (8 * j);
    a = fmix64(a ^ tail ^ 0x52dce729ULL);
    b = fmix64(b + tail * 0x38495ab5ULL + a);
    *h1 = a;
    *h2 = b;
}

typedef struct { uint64_t h1, h2; int64_t offset; } map_slot;

/* the slot of the key: its own or the empty one where it would go */
static map_slot *map_find(map_slot *t, Py_ssize_t slots, uint64_t h1, uint64_t h2)
{
    Py_ssize_t i = (Py_ssize_t)(h1 % (uint64_t)slots);
    for (;;) {
        map_slot *s = &t[i];
        if (s->offset == -1 || (s->h1 == h1 && s->h2 == h2))
            return s;
        if (++i == slots)
            i = 0;
    }
}

static PyObject *map_keys(PyObject *self, PyObject *args)
{
    PyObject *obj, *tobj;
    long count;
    long long base, start;
    Py_ssize_t size, max_entries;
    if (!PyArg_ParseTuple(args, "OlLLOnn", &obj, &count, &base, &start, &tobj, &size, &max_entries))
        return NULL;
    Py_buffer view, table;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(tobj, &table, PyBUF_WRITABLE) < 0) { PyBuffer_Release(&view); return NULL; }
    Py_ssize_t slots = table.len / (Py_ssize_t)sizeof(map_slot);
    if (slots <= 0 || max_entries >= slots) {
        PyBuffer_Release(&view); PyBuffer_Release(&table);
        return invalid("offset map of %ld slots cannot hold %ld entries", (long)slots, (long)max_entries);
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    map_slot *t = (map_slot *)table.buf;
    Py_ssize_t pos = 0;
    long i;
    int full = 0, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < count && pos < view.len; i++) {
        rec_view r;
        if (next_record_nogil(b, &pos, view.len, &r) < 0) { failed = 1; break; }
        long long offset = base + r.offset_delta;
        if (r.key == NULL || offset < start)
            continue;
        uint64_t h1, h2;
        key_hash(r.key, r.key_len, &h1, &h2);
        map_slot *s = map_find(t, slots, h1, h2);
        if (s->offset == -1) {
            if (size >= max_entries) { full = 1; break; }
            s->h1 = h1;
            s->h2 = h2;
            size++;
        }
        s->offset = offset;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&table);
    if (failed)
        return invalid("record %ld of the batch is malformed", i);
    return Py_BuildValue("(lOn)", i, full ? Py_True : Py_False, size);
}

static PyObject *retain(PyObject *self, PyObject *args)
{
    PyObject *obj, *tobj;
    long count;
    long long base, latest;
    int drop_tombstones;
    if (!PyArg_ParseTuple(args, "OlLOLp", &obj, &count, &base, &tobj, &latest, &drop_tombstones))
        return NULL;
    Py_buffer view, table;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(tobj, &table, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&view); return NULL; }
    Py_ssize_t slots = table.len / (Py_ssize_t)sizeof(map_slot);
    const unsigned char *b = (const unsigned char *)view.buf;
    const map_slot *t = (const map_slot *)table.buf;
    char *out = PyMem_Malloc(view.len ? view.len : 1);
    if (!out) { PyBuffer_Release(&view); PyBuffer_Release(&table); return PyErr_NoMemory(); }
    Py_ssize_t pos = 0, olen = 0;
    long i, kept = 0;
    int tombstone_kept = 0, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < count && pos < view.len; i++) {
        rec_view r;
        if (next_record_nogil(b, &pos, view.len, &r) < 0) { failed = 1; break; }
        long long offset = base + r.offset_delta;
        int keep;
        if (offset > latest) {
            keep = 1;
        } else if (r.key == NULL) {
            keep = 0;
        } else {
            long long latest_for_key = -1;
            if (slots > 0) {
                uint64_t h1, h2;
                key_hash(r.key, r.key_len, &h1, &h2);
                latest_for_key = map_find((map_slot *)t, slots, h1, h2)->offset;
            }
            keep = latest_for_key <= offset && !(r.value_null && drop_tombstones);
        }
        if (keep) {
            memcpy(out + olen, b + r.start, r.end - r.start);
            olen += r.end - r.start;
            kept++;
            tombstone_kept |= r.value_null;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (failed)
        invalid("record %ld of the batch is malformed", i);
    else if (i != count)
        invalid("batch declares %ld records but contains %ld", count, i);
    else
        result = Py_BuildValue("(y#lO)", out, olen, kept, tombstone_kept ? Py_True : Py_False);
    PyMem_Free(out);
    PyBuffer_Release(&view);
    PyBuffer_Release(&table);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Check the framing of every field of every record."},
    {"walk", walk, METH_VARARGS, "Check that record length prefixes tile the range."},
    {"columns", columns, METH_VARARGS, "The records of one batch payload as column buffers."},
    {"encode", encode, METH_VARARGS, "The records section of a batch for rows of two binary columns."},
    {"murmur2_partitions", murmur2_partitions, METH_VARARGS, "Kafka's default partition of each key."},
    {"map_keys", map_keys, METH_VARARGS, "The log cleaner's offset map from one batch payload."},
    {"retain", retain, METH_VARARGS, "The records of one batch payload the log cleaner keeps."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cscan(void) { return PyModule_Create(&module); }
