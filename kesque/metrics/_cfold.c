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
 * fold(read, recv, local, remote, end, bounds, totals, phases) -> None
 *     read, recv, local, remote, end: sequences of ints of one length, per request (ns): the
 *     connection's last read (0: none), the frame parsed, the handler returned (0: not noted,
 *     then end), the wait it handed over ended (0: none), the response queued.
 *     bounds: the buckets' upper bounds (ns, ascending ints; +Inf follows).
 *     totals: a list of len(bounds) + 2 ints (the buckets' counts, +Inf last, then the sum),
 *     the total time's histogram; phases: four such lists end to end (queue, local, remote,
 *     response). Both are added to in place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAX_BOUNDS 64

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

static PyObject *fold(PyObject *self, PyObject *args)
{
    PyObject *cols_in[5], *bounds_in, *totals, *phases;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O!", &cols_in[0], &cols_in[1], &cols_in[2], &cols_in[3], &cols_in[4],
                          &bounds_in, &PyList_Type, &totals, &PyList_Type, &phases))
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
    if (PyList_GET_SIZE(totals) != width || PyList_GET_SIZE(phases) != 4 * width) {
        PyErr_SetString(PyExc_ValueError, "histogram lists of the wrong length");
        return NULL;
    }
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL};
    PyObject *result = NULL;
    long long *counts = NULL; /* 5 histograms: counts, then the sum */
    Py_ssize_t n = -1;
    for (int c = 0; c < 5; c++) {
        cols[c] = PySequence_Fast(cols_in[c], "the columns must be sequences");
        if (cols[c] == NULL)
            goto done;
        if (n >= 0 && PySequence_Fast_GET_SIZE(cols[c]) != n) {
            PyErr_SetString(PyExc_ValueError, "columns of different lengths");
            goto done;
        }
        n = PySequence_Fast_GET_SIZE(cols[c]);
    }
    counts = PyMem_Calloc(5 * (size_t)width, sizeof(long long));
    if (counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject **read = PySequence_Fast_ITEMS(cols[0]), **recv = PySequence_Fast_ITEMS(cols[1]),
             **local = PySequence_Fast_ITEMS(cols[2]), **remote = PySequence_Fast_ITEMS(cols[3]),
             **end = PySequence_Fast_ITEMS(cols[4]);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long rd = PyLong_AsLongLong(read[i]), rc = PyLong_AsLongLong(recv[i]), lo = PyLong_AsLongLong(local[i]),
                  rm = PyLong_AsLongLong(remote[i]), en = PyLong_AsLongLong(end[i]);
        if (PyErr_Occurred())
            goto done;
        if (lo == 0)
            lo = en;
        long long mid = rm ? rm : lo;
        long long d[5] = {en - rc, (rd && rc > rd) ? rc - rd : 0, lo - rc, mid - lo, en - mid};
        for (int h = 0; h < 5; h++) {
            long long *hist = counts + h * width;
            hist[bucket(bounds, nb, d[h])]++;
            long long s;
            if (__builtin_add_overflow(hist[nb + 1], d[h], &s)) {
                /* the sum so far into the list (Python ints do not overflow), then this one */
                if (add_at(h == 0 ? totals : phases, (h == 0 ? 0 : (h - 1) * width) + nb + 1, hist[nb + 1]) < 0)
                    goto done;
                s = d[h];
            }
            hist[nb + 1] = s;
        }
    }
    for (int h = 0; h < 5; h++) {
        PyObject *target = h == 0 ? totals : phases;
        Py_ssize_t base = h == 0 ? 0 : (h - 1) * width;
        for (Py_ssize_t j = 0; j < width; j++)
            if (add_at(target, base + j, counts[h * width + j]) < 0)
                goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(counts);
    for (int c = 0; c < 5; c++)
        Py_XDECREF(cols[c]);
    return result;
}

static PyMethodDef methods[] = {
    {"fold", fold, METH_VARARGS, "Add requests' clock readings to the total time and phase histograms."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cfold", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cfold(void) { return PyModule_Create(&module); }
