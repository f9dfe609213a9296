/*
 * kvstoremodule.c - the `kvstore` CPython extension: a thin binding of
 * libkvstore's client API for Python inference engines.
 *
 *   c = kvstore.Client("127.0.0.1:7070")
 *   c.put("k", b"v"); c.get("k") -> b"v"; c.get_into("k", bytearray(n)) -> n
 *   c.batch_put(keys, values) -> [status...]; c.batch_get_into(keys, bufs) -> [len or code...]
 *   b = c.alloc_buffer(n): memory kvstored on this host maps too (kvs_alloc_buffer); values
 *   put from it or got into it (memoryview(b)[i:j]) cross memory once; b.free()
 *
 * The module links libkvstore.so dynamically (DT_NEEDED), so that
 * LD_PRELOAD=libkvbatch.so interposes on the kvs_put/kvs_get it calls. Every
 * blocking call runs with the GIL released: threads of one engine reach the
 * library (and the shim's batcher) at the same time. Errors raise
 * kvstore.Error, an OSError (errno, strerror) carrying .code (negative
 * errno), .message (kvs_strerror) and .key, or its subclass that is also the
 * matching built-in (NotFound: FileNotFoundError and KeyError, Timeout:
 * TimeoutError, ConnectionRefused/ConnectionLost/Unreachable:
 * ConnectionError, InvalidArgument/BufferTooSmall: ValueError ...);
 * docs/python.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>

#include "kvstore.h"
#include "pyargs.h"

PyMODINIT_FUNC PyInit_kvstore(void);

static PyObject *KvsError; /* kvstore.Error(code, message, key), an OSError */

typedef struct {
    PyObject_HEAD kvs_client *client;
    int in_use;      /* calls running without the GIL; guarded by the GIL */
    Py_ssize_t hint; /* last value length seen by get(): first guess of the next */
    /*
     * Buffers of alloc_buffer alive; close() while some are leaves the
     * library client open (their memory with it) until the last one goes.
     */
    Py_ssize_t buffers;
    kvs_client *closed; /* closed by close() but kept for those buffers */
} ClientObject;

/* kvstore.Buffer: memory of kvs_alloc_buffer, exported through the buffer protocol. */
typedef struct {
    PyObject_HEAD ClientObject *owner; /* a strong reference: the client outlives its buffers */
    void *ptr;                         /* NULL once freed */
    Py_ssize_t len;
    Py_ssize_t exports; /* memoryviews (and calls) holding it */
} BufferObject;

/*
 * The exception classes, defined in Python in the module's namespace:
 * Error is an OSError (errno = -code, strerror = message) that also carries
 * .code (negative), .message and .key; each status that has a built-in
 * counterpart raises a subclass that is that built-in too (see errors[]).
 */
static const char ERROR_CLASSES[] =
    "class Error(OSError):\n"
    "    'A kvstore failure: an OSError with errno = -code; .code, .message, .key.'\n"
    "    def __init__(self, code=0, message='', key=''):\n"
    "        OSError.__init__(self, -code if code < 0 else code, message)\n"
    "        self.code = code\n"
    "        self.message = message\n"
    "        self.key = key\n"
    "    def __str__(self):\n"
    "        return '%s (%d)%s' % (self.message, self.code, (': ' + self.key) if self.key else "
    "'')\n"
    "    def __reduce__(self):\n"
    "        return (type(self), (self.code, self.message, self.key))\n"
    "class NotFound(Error, FileNotFoundError, KeyError):\n"
    "    'No such key (ENOENT): also a FileNotFoundError and a KeyError.'\n"
    "    __str__ = Error.__str__\n"
    "class InvalidArgument(Error, ValueError):\n"
    "    'A bad argument (EINVAL, E2BIG): a bad server list, a key too long ...'\n"
    "class BufferTooSmall(Error, ValueError):\n"
    "    'The buffer is smaller than the value (ERANGE); .needed: its length.'\n"
    "    needed = None\n"
    "class ConnectionRefused(Error, ConnectionRefusedError):\n"
    "    'Nothing listens at the server address (ECONNREFUSED).'\n"
    "class ConnectionLost(Error, ConnectionResetError):\n"
    "    'The connection broke with the call in flight (ECONNRESET).'\n"
    "class Unreachable(Error, ConnectionError):\n"
    "    'The server cannot be reached or is not a kvstored (EHOSTUNREACH, EPROTO, EIO).'\n"
    "class Timeout(Error, TimeoutError):\n"
    "    'No reply within the timeout (ETIMEDOUT).'\n"
    "class AccessDenied(Error, PermissionError):\n"
    "    'Authentication failed (EACCES).'\n";

/* The class raised for each status; Error for the others. */
static struct {
    int code;
    const char *name;
    PyObject *cls; /* borrowed from the module's namespace */
} errors[] = {
    {-ENOENT, "NotFound", NULL},
    {-EINVAL, "InvalidArgument", NULL},
    {-E2BIG, "InvalidArgument", NULL},
    {-ERANGE, "BufferTooSmall", NULL},
    {-ECONNREFUSED, "ConnectionRefused", NULL},
    {-ECONNRESET, "ConnectionLost", NULL},
    {-EHOSTUNREACH, "Unreachable", NULL},
    {-EPROTO, "Unreachable", NULL},
    {-EIO, "Unreachable", NULL},
    {-ETIMEDOUT, "Timeout", NULL},
    {-EACCES, "AccessDenied", NULL},
};

/* Runs ERROR_CLASSES in the module's namespace and looks up each class. 0 or -1. */
static int define_errors(PyObject *m)
{
    PyObject *ns = PyModule_GetDict(m); /* borrowed */
    if (PyDict_SetItemString(ns, "__builtins__", PyEval_GetBuiltins()) < 0) return -1;
    PyObject *r = PyRun_String(ERROR_CLASSES, Py_file_input, ns, ns);
    if (!r) return -1;
    Py_DECREF(r);
    KvsError = PyDict_GetItemString(ns, "Error");
    if (!KvsError) return -1;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (!(errors[i].cls = PyDict_GetItemString(ns, errors[i].name))) return -1;
    return 0;
}

/* Longest key (or other subject) an error message echoes: longer ones are cut, with "...". */
#define ECHO_MAX 64

/*
 * Raises the class of errors[] for a negative status (kvstore.Error for the
 * others) with its kvs_strerror text and what it is about (a key, cut to
 * ECHO_MAX characters; "" for none); returns NULL.
 */
static PyObject *raise_status(long code, const char *what)
{
    PyObject *cls = KvsError;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == code) cls = errors[i].cls;
    char echo[ECHO_MAX + 4];
    what = what ? what : "";
    if (strlen(what) > ECHO_MAX)
        snprintf(echo, sizeof(echo), "%.*s...", ECHO_MAX, what);
    else
        snprintf(echo, sizeof(echo), "%s", what);
    PyObject *args = Py_BuildValue("(isN)", (int)code, kvs_strerror((int)code),
                                   PyUnicode_DecodeUTF8(echo, (Py_ssize_t)strlen(echo), "replace"));
    if (args) {
        PyErr_SetObject(cls, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* Raises BufferTooSmall for key, naming both lengths, with .needed; returns NULL. */
static PyObject *raise_too_small(const char *key, long needed, Py_ssize_t have)
{
    raise_status(-ERANGE, key);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value) {
        PyObject *n = PyLong_FromLong(needed);
        PyObject *msg =
            PyUnicode_FromFormat("buffer of %zd bytes, the value needs %ld", have, needed);
        if (n) PyObject_SetAttrString(value, "needed", n);
        if (msg) PyObject_SetAttrString(value, "message", msg);
        Py_XDECREF(n);
        Py_XDECREF(msg);
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* A key argument: str (UTF-8) or bytes, non-empty, without NUL. Borrowed pointer. */
static const char *key_of(PyObject *obj)
{
    Py_ssize_t len = 0;
    const char *key = kvpy_key_chars(obj, &len);
    if (!key) return NULL;
    if (len == 0 || !kvpy_key_is_cstring(key, len)) {
        PyErr_SetString(PyExc_ValueError, "key must be non-empty and contain no NUL");
        return NULL;
    }
    return key;
}

/* The open client, marked busy; NULL with an exception when closed. */
static kvs_client *enter(ClientObject *self)
{
    if (!self->client) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed kvstore.Client");
        return NULL;
    }
    self->in_use++;
    return self->client;
}

static void leave(ClientObject *self)
{
    self->in_use--;
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"servers", NULL};
    const char *servers = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|z:Client", kwlist, &servers)) return -1;
    if (self->client) {
        PyErr_SetString(PyExc_RuntimeError, "kvstore.Client is already initialised");
        return -1;
    }
    kvs_client *c;
    Py_BEGIN_ALLOW_THREADS c = kvs_open(servers);
    Py_END_ALLOW_THREADS if (!c)
    {
        raise_status(-(errno ? errno : EINVAL), servers ? servers : "default servers");
        return -1;
    }
    self->client = c;
    self->hint = 4096;
    return 0;
}

/* The library client behind self, open or kept for its buffers; NULL when gone. */
static kvs_client *library_client(const ClientObject *self)
{
    return self->client ? self->client : self->closed;
}

/* A buffer of self went: the last one of a client closed meanwhile closes it. */
static void buffer_gone(ClientObject *self)
{
    if (--self->buffers > 0 || !self->closed) return;
    kvs_client *c = self->closed;
    self->closed = NULL;
    Py_BEGIN_ALLOW_THREADS kvs_close(c);
    Py_END_ALLOW_THREADS
}

static void Client_dealloc(ClientObject *self)
{
    /* in_use is 0 here: every running call holds a reference to self */
    if (self->client) {
        kvs_client *c = self->client;
        self->client = NULL;
        Py_BEGIN_ALLOW_THREADS kvs_close(c);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Client_close(ClientObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->in_use) {
        PyErr_SetString(PyExc_RuntimeError, "kvstore.Client.close() while calls are running");
        return NULL;
    }
    if (self->client && self->buffers > 0) { /* their memory stays until they go */
        self->closed = self->client;
        self->client = NULL;
    } else if (self->client) {
        kvs_client *c = self->client;
        self->client = NULL;
        Py_BEGIN_ALLOW_THREADS kvs_close(c);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

/* ---- kvstore.Buffer ---- */

static PyTypeObject BufferType;

static PyObject *Client_alloc_buffer(ClientObject *self, PyObject *args)
{
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "n:alloc_buffer", &size)) return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "alloc_buffer: size must be positive");
        return NULL;
    }
    kvs_client *c = enter(self);
    if (!c) return NULL;
    void *ptr = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvs_alloc_buffer(c, (size_t)size, &ptr);
    Py_END_ALLOW_THREADS leave(self);
    if (rc < 0) return raise_status(rc, "alloc_buffer");
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) {
        kvs_free_buffer(c, ptr);
        return NULL;
    }
    Py_INCREF(self);
    b->owner = self;
    b->ptr = ptr;
    b->len = size;
    b->exports = 0;
    self->buffers++;
    return (PyObject *)b;
}

/* Gives b's memory back (once). */
static void buffer_release_memory(BufferObject *b)
{
    if (!b->ptr) return;
    kvs_client *c = library_client(b->owner);
    void *ptr = b->ptr;
    b->ptr = NULL;
    if (c) {
        Py_BEGIN_ALLOW_THREADS kvs_free_buffer(c, ptr);
        Py_END_ALLOW_THREADS
    }
    buffer_gone(b->owner);
}

static PyObject *Buffer_free(BufferObject *b, PyObject *Py_UNUSED(ignored))
{
    if (b->exports > 0) {
        PyErr_SetString(PyExc_BufferError,
                        "kvstore.Buffer.free() while memoryviews of it exist: release them first");
        return NULL;
    }
    buffer_release_memory(b);
    Py_RETURN_NONE;
}

static void Buffer_dealloc(BufferObject *b)
{
    buffer_release_memory(b); /* exports hold references: none is left here */
    Py_XDECREF(b->owner);
    PyObject_Free(b);
}

static int Buffer_getbuffer(BufferObject *b, Py_buffer *view, int flags)
{
    if (!b->ptr) {
        PyErr_SetString(PyExc_ValueError, "kvstore.Buffer has been freed");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)b, b->ptr, b->len, 0, flags) < 0) return -1;
    b->exports++;
    return 0;
}

static void Buffer_releasebuffer(BufferObject *b, Py_buffer *Py_UNUSED(view))
{
    b->exports--;
}

static Py_ssize_t Buffer_len(BufferObject *b)
{
    return b->ptr ? b->len : 0;
}

static PyBufferProcs Buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)Buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Buffer_releasebuffer,
};

static PySequenceMethods Buffer_as_sequence = {.sq_length = (lenfunc)Buffer_len};

static PyMethodDef Buffer_methods[] = {
    {"free", (PyCFunction)Buffer_free, METH_NOARGS,
     "free(): give the memory back now (else when the object goes)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvstore.Buffer",
    .tp_doc = "memory of Client.alloc_buffer(size): writable, through memoryview(); values put "
              "from it or got into it move in place over shared memory",
    .tp_basicsize = sizeof(BufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_methods = Buffer_methods,
};

static PyObject *Client_put(ClientObject *self, PyObject *args)
{
    PyObject *keyobj;
    Py_buffer val;
    if (!PyArg_ParseTuple(args, "Oy*:put", &keyobj, &val)) return NULL;
    const char *key = key_of(keyobj);
    kvs_client *c = key ? enter(self) : NULL;
    if (!c) {
        PyBuffer_Release(&val);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvs_put(c, key, val.buf, (size_t)val.len);
    Py_END_ALLOW_THREADS leave(self);
    PyBuffer_Release(&val);
    if (rc < 0) return raise_status(rc, key);
    Py_RETURN_NONE;
}

/* get(key) -> bytes: one round trip when the value fits the last length seen, else two. */
static PyObject *Client_get(ClientObject *self, PyObject *args)
{
    PyObject *keyobj;
    if (!PyArg_ParseTuple(args, "O:get", &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    Py_ssize_t cap = self->hint > 0 ? self->hint : 4096;
    for (int attempt = 0; attempt < 4; attempt++) {
        PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
        if (!out) return NULL;
        kvs_client *c = enter(self);
        if (!c) {
            Py_DECREF(out);
            return NULL;
        }
        char *buf = PyBytes_AS_STRING(out);
        ssize_t n, probed = 0;
        Py_BEGIN_ALLOW_THREADS n = kvs_get(c, key, buf, (size_t)cap);
        if (n == -ERANGE) probed = kvs_get(c, key, NULL, 0); /* too small: ask the length */
        Py_END_ALLOW_THREADS leave(self);
        if (n >= 0) {
            self->hint = n > 0 ? n : self->hint;
            if (n != cap && _PyBytes_Resize(&out, n) < 0) return NULL;
            return out;
        }
        Py_DECREF(out);
        if (n != -ERANGE) return raise_status(n, key);
        if (probed < 0) return raise_status(probed, key);
        cap = probed;
    }
    return raise_status(-ERANGE, key); /* the value kept growing under us */
}

static PyObject *Client_get_into(ClientObject *self, PyObject *args)
{
    PyObject *keyobj;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "Ow*:get_into", &keyobj, &buf)) return NULL;
    const char *key = key_of(keyobj);
    kvs_client *c = key ? enter(self) : NULL;
    if (!c) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    ssize_t n, needed = 0;
    Py_ssize_t have = buf.len;
    Py_BEGIN_ALLOW_THREADS n = kvs_get(c, key, buf.buf, (size_t)buf.len);
    if (n == -ERANGE) needed = kvs_get(c, key, NULL, 0); /* the length the message names */
    Py_END_ALLOW_THREADS leave(self);
    PyBuffer_Release(&buf);
    if (n == -ERANGE && needed > 0) return raise_too_small(key, (long)needed, have);
    if (n < 0) return raise_status(n, key);
    return PyLong_FromSsize_t(n);
}

static PyObject *Client_exists(ClientObject *self, PyObject *args)
{
    PyObject *keyobj;
    if (!PyArg_ParseTuple(args, "O:exists", &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    kvs_client *c = key ? enter(self) : NULL;
    if (!c) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvs_exists(c, key);
    Py_END_ALLOW_THREADS leave(self);
    if (rc < 0) return raise_status(rc, key);
    return PyBool_FromLong(rc);
}

static PyObject *Client_remove(ClientObject *self, PyObject *args)
{
    PyObject *keyobj;
    if (!PyArg_ParseTuple(args, "O:remove", &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    kvs_client *c = key ? enter(self) : NULL;
    if (!c) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvs_remove(c, key);
    Py_END_ALLOW_THREADS leave(self);
    if (rc < 0) return raise_status(rc, key);
    Py_RETURN_NONE;
}

static PyObject *Client_flush(ClientObject *self, PyObject *Py_UNUSED(ignored))
{
    kvs_client *c = enter(self);
    if (!c) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvs_flush(c);
    Py_END_ALLOW_THREADS leave(self);
    if (rc < 0) return raise_status(rc, ""); /* no key: the first transport error */
    Py_RETURN_NONE;
}

/*
 * What a batch call holds while the GIL is released: the key strings (kept
 * alive by the fast sequence), the buffers, the per-key results.
 */
struct batch {
    PyObject *keyseq;
    Py_ssize_t n;
    const char **keys;
    Py_buffer *bufs;
    Py_ssize_t nbufs; /* how many of bufs are acquired */
    void **ptrs;
    size_t *lens;
    int *status;
    ssize_t *results;
};

static void batch_free(struct batch *b)
{
    for (Py_ssize_t i = 0; i < b->nbufs; i++)
        PyBuffer_Release(&b->bufs[i]);
    PyMem_Free(b->results);
    PyMem_Free(b->status);
    PyMem_Free(b->lens);
    PyMem_Free(b->ptrs);
    PyMem_Free(b->bufs);
    PyMem_Free(b->keys);
    Py_XDECREF(b->keyseq);
    memset(b, 0, sizeof(*b));
}

/* Collects keys (and, if bufseq, one buffer per key: writable when writable). */
static int batch_prepare(struct batch *b, PyObject *keys, PyObject *bufseq, int writable)
{
    memset(b, 0, sizeof(*b));
    b->keyseq = PySequence_Fast(keys, "keys must be a sequence");
    if (!b->keyseq) return -1;
    b->n = PySequence_Fast_GET_SIZE(b->keyseq);
    Py_ssize_t n = b->n ? b->n : 1;
    b->keys = PyMem_Calloc((size_t)n, sizeof(*b->keys));
    b->bufs = PyMem_Calloc((size_t)n, sizeof(*b->bufs));
    b->ptrs = PyMem_Calloc((size_t)n, sizeof(*b->ptrs));
    b->lens = PyMem_Calloc((size_t)n, sizeof(*b->lens));
    b->status = PyMem_Calloc((size_t)n, sizeof(*b->status));
    b->results = PyMem_Calloc((size_t)n, sizeof(*b->results));
    if (!b->keys || !b->bufs || !b->ptrs || !b->lens || !b->status || !b->results) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        b->keys[i] = key_of(PySequence_Fast_GET_ITEM(b->keyseq, i));
        if (!b->keys[i]) return -1;
    }
    if (!bufseq) return 0;
    PyObject *seq = PySequence_Fast(bufseq, "values/buffers must be a sequence");
    if (!seq) return -1;
    int rc = -1;
    if (PySequence_Fast_GET_SIZE(seq) != b->n) {
        PyErr_SetString(PyExc_ValueError, "keys and values/buffers differ in length");
        goto out;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyObject_GetBuffer(item, &b->bufs[i], writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
            goto out;
        b->nbufs++;
        b->ptrs[i] = b->bufs[i].buf;
        b->lens[i] = (size_t)b->bufs[i].len;
    }
    rc = 0;
out:
    Py_DECREF(seq);
    return rc;
}

static PyObject *int_list(const struct batch *b, int use_results, int as_bool)
{
    if (use_results) return kvpy_int_list(b->results, sizeof(*b->results), b->n, as_bool);
    return kvpy_int_list(b->status, sizeof(*b->status), b->n, as_bool);
}

/* batch_put(keys, values) -> [0 or negative code per key] */
static PyObject *Client_batch_put(ClientObject *self, PyObject *args)
{
    PyObject *keys, *vals, *res = NULL;
    struct batch b;
    if (!PyArg_ParseTuple(args, "OO:batch_put", &keys, &vals)) return NULL;
    if (batch_prepare(&b, keys, vals, 0) == 0) {
        kvs_client *c = enter(self);
        if (c) {
            int rc;
            Py_BEGIN_ALLOW_THREADS rc = kvs_batch_put(
                c, (size_t)b.n, b.keys, (const void *const *)b.ptrs, b.lens, b.status);
            Py_END_ALLOW_THREADS leave(self);
            res = rc < 0 ? raise_status(rc, "") : int_list(&b, 0, 0);
        }
    }
    batch_free(&b);
    return res;
}

/* batch_get_into(keys, buffers) -> [value length or negative code per key] */
static PyObject *Client_batch_get_into(ClientObject *self, PyObject *args)
{
    PyObject *keys, *bufs, *res = NULL;
    struct batch b;
    if (!PyArg_ParseTuple(args, "OO:batch_get_into", &keys, &bufs)) return NULL;
    if (batch_prepare(&b, keys, bufs, 1) == 0) {
        kvs_client *c = enter(self);
        if (c) {
            int rc;
            Py_BEGIN_ALLOW_THREADS rc =
                kvs_batch_get(c, (size_t)b.n, b.keys, b.ptrs, b.lens, b.results);
            Py_END_ALLOW_THREADS leave(self);
            res = rc < 0 ? raise_status(rc, "") : int_list(&b, 1, 0);
        }
    }
    batch_free(&b);
    return res;
}

/* batch_exists(keys) -> [True/False, or a negative code per key] */
static PyObject *Client_batch_exists(ClientObject *self, PyObject *args)
{
    PyObject *keys, *res = NULL;
    struct batch b;
    if (!PyArg_ParseTuple(args, "O:batch_exists", &keys)) return NULL;
    if (batch_prepare(&b, keys, NULL, 0) == 0) {
        kvs_client *c = enter(self);
        if (c) {
            int rc;
            Py_BEGIN_ALLOW_THREADS rc = kvs_batch_exists(c, (size_t)b.n, b.keys, b.status);
            Py_END_ALLOW_THREADS leave(self);
            res = rc < 0 ? raise_status(rc, "") : int_list(&b, 0, 1);
        }
    }
    batch_free(&b);
    return res;
}

/*
 * Every server's text from fetch (kvs_server_stats, kvs_server_clients) as a
 * str. fetch truncates to the buffer, so a text that fills it is fetched
 * again into one four times larger, up to SERVER_TEXT_MAX: a str that was cut
 * short would look complete.
 */
#define SERVER_TEXT_MAX ((size_t)1 << 30)

static PyObject *server_text(ClientObject *self, ssize_t (*fetch)(kvs_client *, char *, size_t))
{
    for (size_t cap = 4096;; cap *= 4) {
        char *buf = PyMem_Malloc(cap);
        if (!buf) return PyErr_NoMemory();
        kvs_client *c = enter(self);
        if (!c) {
            PyMem_Free(buf);
            return NULL;
        }
        ssize_t n;
        Py_BEGIN_ALLOW_THREADS n = fetch(c, buf, cap);
        Py_END_ALLOW_THREADS leave(self);
        PyObject *res = NULL;
        if (n < 0)
            res = raise_status(n, "");
        else if ((size_t)n + 1 < cap)
            res = PyUnicode_FromStringAndSize(buf, n);
        else if (cap >= SERVER_TEXT_MAX)
            PyErr_Format(PyExc_MemoryError, "server text longer than %zu bytes", cap - 1);
        PyMem_Free(buf);
        if (res || PyErr_Occurred()) return res;
    }
}

static PyObject *Client_server_stats(ClientObject *self, PyObject *Py_UNUSED(ignored))
{
    return server_text(self, kvs_server_stats);
}

static PyObject *Client_server_clients(ClientObject *self, PyObject *Py_UNUSED(ignored))
{
    return server_text(self, kvs_server_clients);
}

static PyObject *Client_enter(ClientObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Client_exit(ClientObject *self, PyObject *Py_UNUSED(args))
{
    PyObject *r = Client_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyMethodDef Client_methods[] = {
    {"put", (PyCFunction)Client_put, METH_VARARGS, "put(key, value): store a bytes-like value"},
    {"get", (PyCFunction)Client_get, METH_VARARGS, "get(key) -> bytes; NotFound if missing"},
    {"get_into", (PyCFunction)Client_get_into, METH_VARARGS,
     "get_into(key, buffer) -> length; the buffer must be writable and large enough"},
    {"exists", (PyCFunction)Client_exists, METH_VARARGS, "exists(key) -> bool"},
    {"remove", (PyCFunction)Client_remove, METH_VARARGS, "remove(key)"},
    {"batch_put", (PyCFunction)Client_batch_put, METH_VARARGS,
     "batch_put(keys, values) -> list of 0 or a negative code per key"},
    {"batch_get_into", (PyCFunction)Client_batch_get_into, METH_VARARGS,
     "batch_get_into(keys, buffers) -> list of lengths or negative codes"},
    {"batch_exists", (PyCFunction)Client_batch_exists, METH_VARARGS,
     "batch_exists(keys) -> list of True/False or negative codes"},
    {"flush", (PyCFunction)Client_flush, METH_NOARGS, "flush(): wait for outstanding ops"},
    {"server_stats", (PyCFunction)Client_server_stats, METH_NOARGS,
     "server_stats() -> str of 'name value' lines"},
    {"server_clients", (PyCFunction)Client_server_clients, METH_NOARGS,
     "server_clients() -> str: each server's connections, one 'id=... addr=...' line each"},
    {"alloc_buffer", (PyCFunction)Client_alloc_buffer, METH_VARARGS,
     "alloc_buffer(size) -> kvstore.Buffer: memory a same-host kvstored maps (one copy)"},
    {"close", (PyCFunction)Client_close, METH_NOARGS, "close(): release the client"},
    {"__enter__", (PyCFunction)Client_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Client_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvstore.Client",
    .tp_doc = "Client(servers=None): a connection to kvstored nodes, shared by threads",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_methods = Client_methods,
};

static PyObject *mod_strerror(PyObject *Py_UNUSED(mod), PyObject *args)
{
    int code;
    if (!PyArg_ParseTuple(args, "i:strerror", &code)) return NULL;
    return PyUnicode_FromString(kvs_strerror(code));
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_VARARGS, "strerror(code) -> kvs_strerror text"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kvstore_module = {
    PyModuleDef_HEAD_INIT, .m_name = "kvstore",
    .m_doc = "Client binding of libkvstore (kvbatch's KV-cache store)", .m_size = -1,
    .m_methods = module_methods};

PyMODINIT_FUNC PyInit_kvstore(void)
{
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&BufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&kvstore_module);
    if (!m) return NULL;
    if (define_errors(m) < 0) goto fail;
    Py_INCREF(&ClientType);
    if (PyModule_AddObject(m, "Client", (PyObject *)&ClientType) < 0) goto fail;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "MAX_KEY", KVS_MAX_KEY) < 0) goto fail;
    if (PyModule_AddStringConstant(m, "__version__", kvs_version()) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
