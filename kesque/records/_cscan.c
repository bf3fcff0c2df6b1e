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
 * Errors raise ValueError with Kafka's messages; the caller turns them into INVALID_RECORD.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Check the framing of every field of every record."},
    {"walk", walk, METH_VARARGS, "Check that record length prefixes tile the range."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cscan(void) { return PyModule_Create(&module); }
