/*
 * The request time histograms of kesque.metrics.stats, folded in bulk, compiled.
 *
 * With metrics on, the request path notes each answered request's clock readings in a list
 * (RequestMetrics.pending) instead of counting it at once; RequestMetrics.fold turns a batch of
 * them into Kafka's RequestMetrics histograms (TotalTimeMs and its four parts). In Python that
 * is a bisect and two additions per histogram per request, more than the rest of a small
 * request's metrics together; here a few nanoseconds. stats.py's _fold_python stays the
 * reference and the fallback when this module is not built; tests run both on the same inputs.
 *
 * note(pending, cap, *items) -> bool
 *     The request path's side: ``items`` then the clock (perf_counter_ns' CLOCK_MONOTONIC) added to
 *     the list ``pending``; True when it holds ``cap`` items or more (time to fold). No tuple to
 *     build, no length to allocate, no clock call of its own from Python.
 * extend(pending, cap, *items) -> bool
 *     The same without the clock (the Produce path's appends, BrokerTopicStats.pending).
 * now() -> int
 *     The clock ``note`` reads (checked against time.perf_counter_ns at import).
 * reset(pending) -> None
 *     The list emptied after a fold, its room kept: the next batch is added without resizes.
 *
 * fold(pending, bounds, by_version, phases, fetch, consumer, follower) -> None
 *     pending: the flat list of RequestMetrics.pending, FIELDS items a request: API key,
 *     version, follower (bool), then in ns the connection's last read (0: none), the frame
 *     parsed, the handler handed the rest to a wait (0: it answered at once, then the end), the wait it handed over ended
 *     (0: none), the response queued.
 *     bounds: the buckets' upper bounds (ns, ascending ints; +Inf follows).
 *     by_version: {(API, version): a list of len(bounds) + 2 ints}, the total time's bucket
 *     counts (+Inf last) then its sum; phases: {API: four such lists end to end} (queue, local,
 *     remote, response). Lists missing are made; all are added to in place. A Fetch (API
 *     ``fetch``) counts under ``follower`` or ``consumer`` too, as Kafka's FetchFollower and
 *     FetchConsumer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#define MAX_BOUNDS 64
#define FIELDS 8 /* a request's items in the pending list (kesque.metrics.stats.PENDING_FIELDS) */

/* an int of the pending list: the digits of a small one read directly (a clock reading is two
   30-bit digits), anything else through the C API (-1 with an error set on failure) */
static inline long long as_ll(PyObject *o)
{
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0:
            return 0;
        case 1:
            return (long long)d[0];
        case 2:
            return (long long)d[0] | ((long long)d[1] << PyLong_SHIFT);
        default:
            break;
        }
    }
#endif
    return PyLong_AsLongLong(o);
}

static Py_ssize_t bucket(const long long *bounds, Py_ssize_t nb, long long x)
{
    Py_ssize_t i = 0;
    while (i < nb && bounds[i] < x) /* bisect_left: a value on a bound is in that bound's bucket */
        i++;
    return i;
}

/* list[i] += v */
static int add_at(PyObject *list, Py_ssize_t i, long long v)
{
    if (v == 0)
        return 0;
    PyObject *add = PyLong_FromLongLong(v);
    if (add == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, i), add);
    Py_DECREF(add);
    if (sum == NULL)
        return -1;
    return PyList_SetItem(list, i, sum); /* steals sum */
}

#define MAX_KEYS 64 /* distinct (API, version, follower) in one batch before the counts are flushed */

typedef struct {
    long api, version;
    int follower;
    long long *counts; /* 5 histograms of `width`: total, queue, local, remote, response */
} Slot;

/* target[base + j] += counts[j] for j < width */
static int add_counts(PyObject *target, Py_ssize_t base, const long long *counts, Py_ssize_t width)
{
    for (Py_ssize_t j = 0; j < width; j++)
        if (add_at(target, base + j, counts[j]) < 0)
            return -1;
    return 0;
}

/* the list of `length` zeros at d[key], made when missing (borrowed) */
static PyObject *histogram_list(PyObject *d, PyObject *key, Py_ssize_t length)
{
    PyObject *list = PyDict_GetItemWithError(d, key);
    if (list != NULL || PyErr_Occurred())
        return list;
    list = PyList_New(length);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < length; i++) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, zero);
    }
    int rc = PyDict_SetItem(d, key, list);
    Py_DECREF(list);
    return rc < 0 ? NULL : list;
}

/* one slot's counts into by_version[(api, version)] and phases[api], a Fetch's also under its
   consumer or follower key */
static int flush_slot(const Slot *s, Py_ssize_t width, PyObject *by_version, PyObject *phases, long fetch,
                      long consumer, long follower)
{
    long keys[2] = {s->api, s->follower ? follower : consumer};
    int nkeys = s->api == fetch ? 2 : 1;
    for (int k = 0; k < nkeys; k++) {
        PyObject *vkey = Py_BuildValue("(ll)", keys[k], s->version), *pkey = PyLong_FromLong(keys[k]);
        PyObject *totals = vkey && pkey ? histogram_list(by_version, vkey, width) : NULL;
        PyObject *ph = totals ? histogram_list(phases, pkey, 4 * width) : NULL;
        Py_XDECREF(vkey);
        Py_XDECREF(pkey);
        if (ph == NULL)
            return -1;
        if (PyList_GET_SIZE(totals) != width || PyList_GET_SIZE(ph) != 4 * width) {
            PyErr_SetString(PyExc_ValueError, "histogram lists of the wrong length");
            return -1;
        }
        if (add_counts(totals, 0, s->counts, width) < 0)
            return -1;
        for (int h = 1; h < 5; h++)
            if (add_counts(ph, (h - 1) * width, s->counts + h * width, width) < 0)
                return -1;
    }
    return 0;
}

static int flush(Slot *slots, int *nslots, Py_ssize_t width, PyObject *by_version, PyObject *phases, long fetch,
                 long consumer, long follower)
{
    int rc = 0;
    for (int i = 0; i < *nslots; i++) {
        if (rc == 0)
            rc = flush_slot(&slots[i], width, by_version, phases, fetch, consumer, follower);
        PyMem_Free(slots[i].counts);
    }
    *nslots = 0;
    return rc;
}

static PyObject *fold(PyObject *self, PyObject *args)
{
    PyObject *pending, *bounds_in, *by_version, *phases;
    long fetch, consumer, follower;
    if (!PyArg_ParseTuple(args, "O!OO!O!lll", &PyList_Type, &pending, &bounds_in, &PyDict_Type, &by_version,
                          &PyDict_Type, &phases, &fetch, &consumer, &follower))
        return NULL;
    long long bounds[MAX_BOUNDS];
    Py_ssize_t nb = PySequence_Length(bounds_in);
    if (nb < 0)
        return NULL;
    if (nb > MAX_BOUNDS) {
        PyErr_SetString(PyExc_ValueError, "too many bounds");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        PyObject *b = PySequence_GetItem(bounds_in, i);
        if (b == NULL)
            return NULL;
        bounds[i] = PyLong_AsLongLong(b);
        Py_DECREF(b);
        if (bounds[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    const Py_ssize_t width = nb + 2; /* the buckets, +Inf, the sum */
    Py_ssize_t n = PyList_GET_SIZE(pending);
    if (n % FIELDS) {
        PyErr_SetString(PyExc_ValueError, "the pending list is not whole requests");
        return NULL;
    }
    Slot slots[MAX_KEYS];
    int nslots = 0;
    Slot *cur = NULL;
    PyObject **items = PySequence_Fast_ITEMS(pending);
    for (Py_ssize_t i = 0; i < n; i += FIELDS) {
        PyObject **r = items + i;
        long api = (long)as_ll(r[0]), version = (long)as_ll(r[1]);
        int fol = r[2] == Py_False ? 0 : r[2] == Py_True ? 1 : PyObject_IsTrue(r[2]);
        long long rd = as_ll(r[3]), rc = as_ll(r[4]), lo = as_ll(r[5]), rm = as_ll(r[6]), en = as_ll(r[7]);
        if (fol < 0 || ((api == -1 || version == -1 || rd == -1 || rc == -1 || lo == -1 || rm == -1 || en == -1) &&
                        PyErr_Occurred()))
            goto error;
        if (lo == 0)
            lo = en;
        long long mid = rm ? rm : lo;
        long long d[5] = {en - rc, (rd && rc > rd) ? rc - rd : 0, lo - rc, mid - lo, en - mid};
        for (int attempt = 0; attempt < 2; attempt++) {
            if (cur == NULL || cur->api != api || cur->version != version || cur->follower != fol) {
                cur = NULL;
                for (int k = 0; k < nslots; k++)
                    if (slots[k].api == api && slots[k].version == version && slots[k].follower == fol)
                        cur = &slots[k];
            }
            if (cur == NULL) {
                if (nslots == MAX_KEYS && flush(slots, &nslots, width, by_version, phases, fetch, consumer, follower) < 0)
                    goto error;
                cur = &slots[nslots];
                cur->counts = PyMem_Calloc(5 * (size_t)width, sizeof(long long));
                if (cur->counts == NULL) {
                    PyErr_NoMemory();
                    goto error;
                }
                cur->api = api;
                cur->version = version;
                cur->follower = fol;
                nslots++;
            }
            long long sums[5];
            int over = 0;
            for (int h = 0; h < 5; h++)
                over |= __builtin_add_overflow(cur->counts[h * width + nb + 1], d[h], &sums[h]);
            if (over) { /* the counts so far into the lists (Python ints do not overflow), then this one */
                if (flush(slots, &nslots, width, by_version, phases, fetch, consumer, follower) < 0)
                    goto error;
                cur = NULL;
                continue;
            }
            for (int h = 0; h < 5; h++) {
                cur->counts[h * width + bucket(bounds, nb, d[h])]++;
                cur->counts[h * width + nb + 1] = sums[h];
            }
            break;
        }
    }
    if (flush(slots, &nslots, width, by_version, phases, fetch, consumer, follower) < 0)
        return NULL;
    Py_RETURN_NONE;
error:
    for (int k = 0; k < nslots; k++)
        PyMem_Free(slots[k].counts);
    return NULL;
}

static int now_ns(long long *t)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *t = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return 0;
}

/* items args[2:] (and, with `clock`, the time) appended to the list args[0]; whether it now holds
   args[1] items or more. A list ``reset`` keeps its room: the items go straight into it, without
   a resize (and the copy of the list a resize makes) while they fit. */
static PyObject *append_items(PyObject *const *args, Py_ssize_t nargs, int clock)
{
    if (nargs < 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "expected (list, cap, *items)");
        return NULL;
    }
    PyListObject *list = (PyListObject *)args[0];
    Py_ssize_t cap = PyLong_AsSsize_t(args[1]);
    if (cap == -1 && PyErr_Occurred())
        return NULL;
    long long t = 0;
    if (clock && now_ns(&t) < 0)
        return NULL;
    Py_ssize_t n = Py_SIZE(list), k = nargs - 2;
    if (n + k + clock <= list->allocated) {
        for (Py_ssize_t i = 0; i < k; i++) {
            Py_INCREF(args[2 + i]);
            list->ob_item[n + i] = args[2 + i];
        }
        Py_SET_SIZE(list, n + k);
    } else {
        for (Py_ssize_t i = 0; i < k; i++)
            if (PyList_Append((PyObject *)list, args[2 + i]) < 0)
                return NULL;
    }
    if (clock) {
        PyObject *o = PyLong_FromLongLong(t);
        if (o == NULL)
            return NULL;
        n = Py_SIZE(list);
        if (n < list->allocated) {
            list->ob_item[n] = o; /* the reference is the list's */
            Py_SET_SIZE(list, n + 1);
        } else {
            int rc = PyList_Append((PyObject *)list, o);
            Py_DECREF(o);
            if (rc < 0)
                return NULL;
        }
    }
    return PyBool_FromLong(Py_SIZE(list) >= cap);
}

/* reset(list): empty the list but keep its room (list.clear frees it, and the next batch would
   grow it again, copying it at each step). One item released at a time from the end, the list
   whole at each release. */
static PyObject *reset(PyObject *self, PyObject *arg)
{
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "expected a list");
        return NULL;
    }
    PyListObject *list = (PyListObject *)arg;
    Py_ssize_t n;
    while ((n = Py_SIZE(list)) > 0) {
        PyObject *o = list->ob_item[n - 1];
        Py_SET_SIZE(list, n - 1);
        Py_DECREF(o);
    }
    Py_RETURN_NONE;
}

static PyObject *note(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return append_items(args, nargs, 1);
}

static PyObject *extend(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return append_items(args, nargs, 0);
}

static PyObject *now(PyObject *self, PyObject *unused)
{
    long long t;
    if (now_ns(&t) < 0)
        return NULL;
    return PyLong_FromLongLong(t);
}

static PyMethodDef methods[] = {
    {"fold", fold, METH_VARARGS, "Add pending requests' clock readings to the time histograms per API."},
    {"note", (PyCFunction)(void (*)(void))note, METH_FASTCALL, "note(list, cap, *items): append items and the time; full?"},
    {"extend", (PyCFunction)(void (*)(void))extend, METH_FASTCALL, "extend(list, cap, *items): append items; full?"},
    {"now", now, METH_NOARGS, "The clock note reads, in ns."},
    {"reset", reset, METH_O, "reset(list): empty it, keeping its room for the next batch."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cfold", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cfold(void) { return PyModule_Create(&module); }
