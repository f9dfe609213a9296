/*
 * pyargs.h - argument unpacking and result lists shared by kvbatch's two
 * CPython modules (python/kvstoremodule.c, python/mooncake_store.c), written
 * once here: each module includes it (static inline: no symbol of its own)
 * and keeps only its own policy (which keys it refuses, and how).
 */
#ifndef KVPY_PYARGS_H
#define KVPY_PYARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/*
 * A key argument's bytes: str (as UTF-8) or bytes, borrowed from obj, with
 * its length in *len (it may hold a NUL: the caller decides). NULL with
 * TypeError for anything else.
 */
static inline const char *kvpy_key_chars(PyObject *obj, Py_ssize_t *len)
{
    if (PyUnicode_Check(obj)) return PyUnicode_AsUTF8AndSize(obj, len);
    if (PyBytes_Check(obj)) {
        *len = PyBytes_GET_SIZE(obj);
        return PyBytes_AS_STRING(obj);
    }
    PyErr_Format(PyExc_TypeError, "key must be str or bytes, not %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
}

/* True when a key's bytes hold no NUL (they can then be used as a C string). */
static inline int kvpy_key_is_cstring(const char *key, Py_ssize_t len)
{
    return (size_t)len == strlen(key);
}

/*
 * The per-key results v[0..n) as a list of ints; width is sizeof one
 * element (int: 4; ssize_t or int64_t: 8). as_bool: results >= 0 become
 * True/False (existence). NULL with an exception.
 */
static inline PyObject *kvpy_int_list(const void *v, size_t width, Py_ssize_t n, int as_bool)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        long long x = width == sizeof(int) ? ((const int *)v)[i] : ((const int64_t *)v)[i];
        PyObject *o = as_bool && x >= 0 ? PyBool_FromLong(x != 0) : PyLong_FromLongLong(x);
        if (!o) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
}

#endif /* KVPY_PYARGS_H */
