/*
 * mooncake_store.c - `mooncake.store`, a drop-in for Mooncake Store's Python
 * module (mooncake-integration/store/store_py.cpp) over kvstored:
 *
 *   from mooncake.store import MooncakeDistributedStore, ReplicateConfig
 *   store = MooncakeDistributedStore()
 *   store.setup(hostname, metadata_server, segment_size, buffer_size, "tcp", "",
 *               "127.0.0.1:7070")                       # the kvstored servers
 *   store.put_from(key, ptr, size)                     # pointers are ints
 *
 * The methods keep Mooncake's signatures and return conventions (ints: 0 /
 * a length / 1-0 for existence, or a negative Mooncake code; lists of them
 * for batches; bytes for get, b"" when absent). Each one is a call of the C
 * drop-in (mooncake/store_c.c, linked into this module), so the statuses,
 * argument checks and setup rules are the C library's (docs/mooncake.md).
 * The single-key methods end in libkvstore's single-key calls (kvs_put,
 * kvs_get, kvs_exists), which LD_PRELOAD=libkvbatch.so batches across
 * threads. Every call that can block runs with the GIL released.
 *
 * Arguments Python cannot pass (not a str key, not an int pointer, not a
 * bytes-like value) raise TypeError, as pybind11 does for Mooncake's module;
 * a key containing NUL, or lists of different lengths, give -600 per key.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#include "kvsmc.h"
#include "pyargs.h"
#include "store_c.h"

PyMODINIT_FUNC PyInit_store(void);

/* ---- ReplicateConfig ---- */

typedef struct {
    PyObject_HEAD Py_ssize_t replica_num;
    char with_soft_pin, with_hard_pin, prefer_alloc_in_same_node;
    PyObject *preferred_segments; /* list of str */
    PyObject *preferred_segment;  /* str */
    PyObject *dict;               /* any other field a connector sets (group_ids, ...) */
} ConfigObject;

static int Config_init(ConfigObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":ReplicateConfig", kwlist)) return -1;
    self->replica_num = 1;
    self->with_soft_pin = self->with_hard_pin = self->prefer_alloc_in_same_node = 0;
    Py_XSETREF(self->preferred_segments, PyList_New(0));
    Py_XSETREF(self->preferred_segment, PyUnicode_FromString(""));
    return self->preferred_segments && self->preferred_segment ? 0 : -1;
}

static int Config_traverse(ConfigObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->preferred_segments);
    Py_VISIT(self->preferred_segment);
    Py_VISIT(self->dict);
    return 0;
}

static int Config_clear(ConfigObject *self)
{
    Py_CLEAR(self->preferred_segments);
    Py_CLEAR(self->preferred_segment);
    Py_CLEAR(self->dict);
    return 0;
}

static void Config_dealloc(ConfigObject *self)
{
    PyObject_GC_UnTrack(self);
    Config_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Config_str(ConfigObject *self)
{
    return PyUnicode_FromFormat("ReplicateConfig: { replica_num: %zd, with_soft_pin: %s, "
                                "with_hard_pin: %s, preferred_segment: %R }",
                                self->replica_num, self->with_soft_pin ? "true" : "false",
                                self->with_hard_pin ? "true" : "false", self->preferred_segment);
}

static PyMemberDef Config_members[] = {
    {"replica_num", T_PYSSIZET, offsetof(ConfigObject, replica_num), 0,
     "copies wanted (kvstored keeps one; 0 is refused with -600)"},
    {"with_soft_pin", T_BOOL, offsetof(ConfigObject, with_soft_pin), 0, "accepted, no effect"},
    {"with_hard_pin", T_BOOL, offsetof(ConfigObject, with_hard_pin), 0, "accepted, no effect"},
    {"prefer_alloc_in_same_node", T_BOOL, offsetof(ConfigObject, prefer_alloc_in_same_node), 0,
     "refused with -600 by puts, as Mooncake does"},
    {"preferred_segments", T_OBJECT_EX, offsetof(ConfigObject, preferred_segments), 0,
     "accepted, no effect"},
    {"preferred_segment", T_OBJECT_EX, offsetof(ConfigObject, preferred_segment), 0,
     "accepted, no effect"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject ConfigType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.ReplicateConfig",
    .tp_doc = "ReplicateConfig(): Mooncake's put options (kvstored keeps one copy per key)",
    .tp_basicsize = sizeof(ConfigObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Config_init,
    .tp_dealloc = (destructor)Config_dealloc,
    .tp_traverse = (traverseproc)Config_traverse,
    .tp_clear = (inquiry)Config_clear,
    .tp_str = (reprfunc)Config_str,
    .tp_members = Config_members,
    .tp_dictoffset = offsetof(ConfigObject, dict),
};

/*
 * The C config for a put's config argument (NULL or None: the default).
 * Returns 0, a Mooncake code (< 0) to return for every key, or -1 with a
 * Python exception set (*raised = 1).
 */
static int config_of(PyObject *obj, mooncake_replicate_config_t *out, int *raised)
{
    *raised = 0;
    memset(out, 0, sizeof(*out));
    out->replica_num = 1;
    if (!obj || obj == Py_None) return 0;
    if (!PyObject_TypeCheck(obj, &ConfigType)) {
        PyErr_Format(PyExc_TypeError, "config must be a ReplicateConfig, not %.100s",
                     Py_TYPE(obj)->tp_name);
        *raised = 1;
        return -1;
    }
    const ConfigObject *c = (const ConfigObject *)obj;
    if (c->replica_num < 0 || c->prefer_alloc_in_same_node) return KVSMC_INVALID_PARAMS;
    out->replica_num = (size_t)c->replica_num;
    out->with_soft_pin = c->with_soft_pin != 0;
    out->with_hard_pin = c->with_hard_pin != 0;
    return 0;
}

/* ---- arguments ---- */

/*
 * A key: str (UTF-8) or bytes, as pybind11's std::string accepts. One with
 * a NUL inside becomes "" (which every call refuses with -600). Borrowed
 * from obj. NULL with TypeError for anything else.
 */
static const char *key_of(PyObject *obj)
{
    Py_ssize_t len = 0;
    const char *key = kvpy_key_chars(obj, &len);
    if (!key) return NULL;
    return kvpy_key_is_cstring(key, len) ? key : "";
}

/* A pointer or size argument: a non-negative int. -1 with TypeError/OverflowError. */
static int uint_of(PyObject *obj, uint64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "buffer pointers and sizes must be int, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* A sequence argument as a tuple (the items stay alive while the GIL is released). */
static PyObject *tuple_of(PyObject *obj, const char *what)
{
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %.100s", what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return PySequence_Tuple(obj);
}

/* What a batch call holds while the GIL is released. */
struct batch {
    Py_ssize_t n;
    PyObject *keyt; /* tuple of the keys */
    const char **keys;
    void **ptrs;
    size_t *sizes;
    Py_buffer *views; /* put_batch: one acquired buffer per key */
    Py_ssize_t nviews;
    struct iovec **iovs; /* multi_buffers: one segment list per key */
    size_t *niov;
    int *res;
    int64_t *res64;
};

static void batch_free(struct batch *b)
{
    for (Py_ssize_t i = 0; i < b->nviews; i++)
        PyBuffer_Release(&b->views[i]);
    if (b->iovs)
        for (Py_ssize_t i = 0; i < b->n; i++)
            PyMem_Free(b->iovs[i]);
    PyMem_Free(b->iovs);
    PyMem_Free(b->niov);
    PyMem_Free(b->views);
    PyMem_Free(b->res64);
    PyMem_Free(b->res);
    PyMem_Free(b->sizes);
    PyMem_Free(b->ptrs);
    PyMem_Free(b->keys);
    Py_XDECREF(b->keyt);
    memset(b, 0, sizeof(*b));
}

/* Collects the keys and allocates the per-key arrays; -1 with an exception. */
static int batch_keys(struct batch *b, PyObject *keys)
{
    memset(b, 0, sizeof(*b));
    b->keyt = tuple_of(keys, "keys");
    if (!b->keyt) return -1;
    b->n = PyTuple_GET_SIZE(b->keyt);
    size_t n = (size_t)b->n + 1;
    b->keys = PyMem_Calloc(n, sizeof(*b->keys));
    b->ptrs = PyMem_Calloc(n, sizeof(*b->ptrs));
    b->sizes = PyMem_Calloc(n, sizeof(*b->sizes));
    b->res = PyMem_Calloc(n, sizeof(*b->res));
    b->res64 = PyMem_Calloc(n, sizeof(*b->res64));
    if (!b->keys || !b->ptrs || !b->sizes || !b->res || !b->res64) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        b->keys[i] = key_of(PyTuple_GET_ITEM(b->keyt, i));
        if (!b->keys[i]) return -1;
    }
    return 0;
}

/*
 * The pointer and size lists of a batch; 1 when their lengths differ from
 * the keys' (Mooncake then answers -600 for every key), 0, or -1 with an
 * exception.
 */
static int batch_ptrs(struct batch *b, PyObject *ptrs, PyObject *sizes)
{
    PyObject *pt = tuple_of(ptrs, "buffer_ptrs"), *st = pt ? tuple_of(sizes, "sizes") : NULL;
    int rc = -1;
    if (!st) goto out;
    if (PyTuple_GET_SIZE(pt) != b->n || PyTuple_GET_SIZE(st) != b->n) {
        rc = 1;
        goto out;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        uint64_t p, s;
        if (uint_of(PyTuple_GET_ITEM(pt, i), &p) < 0 || uint_of(PyTuple_GET_ITEM(st, i), &s) < 0)
            goto out;
        b->ptrs[i] = (void *)(uintptr_t)p;
        b->sizes[i] = (size_t)s;
    }
    rc = 0;
out:
    Py_XDECREF(pt);
    Py_XDECREF(st);
    return rc;
}

/*
 * The segment lists of a multi_buffers batch: all_ptrs[i] and all_sizes[i]
 * for key i. A key whose two lists differ in length becomes "" (-600 for it).
 */
static int batch_segments(struct batch *b, PyObject *all_ptrs, PyObject *all_sizes)
{
    PyObject *pt = tuple_of(all_ptrs, "all_buffer_ptrs");
    PyObject *st = pt ? tuple_of(all_sizes, "all_sizes") : NULL;
    int rc = -1;
    if (!st) goto out;
    if (PyTuple_GET_SIZE(pt) != b->n || PyTuple_GET_SIZE(st) != b->n) {
        rc = 1;
        goto out;
    }
    b->iovs = PyMem_Calloc((size_t)b->n + 1, sizeof(struct iovec *));
    b->niov = PyMem_Calloc((size_t)b->n + 1, sizeof(*b->niov));
    if (!b->iovs || !b->niov) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *p = tuple_of(PyTuple_GET_ITEM(pt, i), "all_buffer_ptrs[i]");
        PyObject *s = p ? tuple_of(PyTuple_GET_ITEM(st, i), "all_sizes[i]") : NULL;
        int ok = s != NULL;
        if (ok && PyTuple_GET_SIZE(p) != PyTuple_GET_SIZE(s)) {
            b->keys[i] = "";
        } else if (ok) {
            Py_ssize_t m = PyTuple_GET_SIZE(p);
            b->iovs[i] = PyMem_Calloc((size_t)m + 1, sizeof(struct iovec));
            ok = b->iovs[i] != NULL;
            if (!ok) PyErr_NoMemory();
            for (Py_ssize_t j = 0; ok && j < m; j++) {
                uint64_t ptr = 0, len = 0;
                ok = uint_of(PyTuple_GET_ITEM(p, j), &ptr) == 0 &&
                     uint_of(PyTuple_GET_ITEM(s, j), &len) == 0;
                b->iovs[i][j] = (struct iovec){(void *)(uintptr_t)ptr, (size_t)len};
            }
            b->niov[i] = (size_t)m;
        }
        Py_XDECREF(p);
        Py_XDECREF(s);
        if (!ok) goto out;
    }
    rc = 0;
out:
    Py_XDECREF(pt);
    Py_XDECREF(st);
    return rc;
}

/* A list of n copies of code: what Mooncake answers for lists of mismatched lengths. */
static PyObject *repeat_list(Py_ssize_t n, long code)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        PyObject *o = PyLong_FromLong(code);
        if (!o) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
}

/* The per-key results as a list of ints. */
static PyObject *result_list(const struct batch *b, int wide)
{
    if (wide) return kvpy_int_list(b->res64, sizeof(*b->res64), b->n, 0);
    return kvpy_int_list(b->res, sizeof(*b->res), b->n, 0);
}

/* ---- MooncakeDistributedStore ---- */

typedef struct {
    PyObject_HEAD mooncake_store_t store; /* never NULL once initialised */
    int in_use;                           /* calls running without the GIL; guarded by the GIL */
    Py_ssize_t hint;                      /* last value length get() saw: its first guess */
} StoreObject;

/* The store for a call, marked busy (close() waits for nobody: it refuses while busy). */
static mooncake_store_t enter(StoreObject *self)
{
    self->in_use++;
    return self->store;
}

static void leave(StoreObject *self)
{
    self->in_use--;
}

static int Store_init(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":MooncakeDistributedStore", kwlist)) return -1;
    if (self->store) return 0;
    self->store = mooncake_store_create();
    if (!self->store) {
        PyErr_NoMemory();
        return -1;
    }
    self->hint = 4096;
    return 0;
}

static void Store_dealloc(StoreObject *self)
{
    /* in_use is 0 here: every running call holds a reference to self */
    if (self->store) {
        mooncake_store_t s = self->store;
        self->store = NULL;
        Py_BEGIN_ALLOW_THREADS mooncake_store_destroy(s);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A str argument of setup: str, or None for "" (C NULL). -1 with TypeError. */
static int str_arg(PyObject *obj, const char *what, const char **out)
{
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(obj);
    return *out ? 0 : -1;
}

/* Runs the C setup with the GIL released. */
static PyObject *do_setup(StoreObject *self, const char *host, const char *meta, uint64_t seg,
                          uint64_t buf, const char *proto, const char *dev, const char *master)
{
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_setup(s, host, meta, seg, buf, proto, dev, master);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

/* setup(config: dict): Mooncake's keys, values as str or int. */
static PyObject *setup_dict(StoreObject *self, PyObject *cfg)
{
    static const char *const names[] = {"local_hostname", "metadata_server", "protocol",
                                        "rdma_devices", "master_server_addr"};
    const char *str[5] = {NULL, NULL, NULL, NULL, NULL};
    uint64_t sizes[2] = {16u << 20, 16u << 20};
    PyObject *held[5] = {NULL, NULL, NULL, NULL, NULL}, *res = NULL;
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyDict_GetItemString(cfg, names[i]);
        if (!v) continue;
        held[i] = PyObject_Str(v);
        if (!held[i] || !(str[i] = PyUnicode_AsUTF8(held[i]))) goto out;
    }
    static const char *const size_names[] = {"global_segment_size", "local_buffer_size"};
    for (int i = 0; i < 2; i++) {
        PyObject *v = PyDict_GetItemString(cfg, size_names[i]);
        if (!v) continue;
        PyObject *n = PyNumber_Long(v);
        if (!n) goto out;
        int bad = uint_of(n, &sizes[i]);
        Py_DECREF(n);
        if (bad) goto out;
    }
    res = do_setup(self, str[0], str[1], sizes[0], sizes[1], str[2], str[3], str[4]);
out:
    for (int i = 0; i < 5; i++)
        Py_XDECREF(held[i]);
    return res;
}

/*
 * setup(local_hostname, metadata_server, global_segment_size,
 * local_buffer_size, protocol, rdma_devices, master_server_addr,
 * engine=None, enable_ssd_offload=False, ssd_offload_path="",
 * tenant_id="default", enable_client_http_server=False,
 * client_http_port=9300), or setup(config: dict). master_server_addr names
 * the kvstored servers. Features kvstored does not have (SSD offload,
 * tenants) give -1012 rather than a setup that ignores them.
 */
static PyObject *Store_setup(StoreObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) == 1 && (!kwds || PyDict_GET_SIZE(kwds) == 0) &&
        PyDict_Check(PyTuple_GET_ITEM(args, 0)))
        return setup_dict(self, PyTuple_GET_ITEM(args, 0));
    static char *kwlist[] = {"local_hostname",
                             "metadata_server",
                             "global_segment_size",
                             "local_buffer_size",
                             "protocol",
                             "rdma_devices",
                             "master_server_addr",
                             "engine",
                             "enable_ssd_offload",
                             "ssd_offload_path",
                             "tenant_id",
                             "enable_client_http_server",
                             "client_http_port",
                             NULL};
    PyObject *host, *meta, *seg, *buf, *proto, *dev, *master, *engine = Py_None;
    int ssd = 0, http = 0, port = 0;
    const char *ssd_path = "", *tenant = "default";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|Opsspi:setup", kwlist, &host, &meta, &seg,
                                     &buf, &proto, &dev, &master, &engine, &ssd, &ssd_path, &tenant,
                                     &http, &port))
        return NULL;
    (void)engine, (void)ssd_path, (void)http, (void)port; /* a shared engine, metrics: not needed */
    const char *h, *m, *p, *d, *ms;
    uint64_t segsz, bufsz;
    if (str_arg(host, "local_hostname", &h) < 0 || str_arg(meta, "metadata_server", &m) < 0 ||
        uint_of(seg, &segsz) < 0 || uint_of(buf, &bufsz) < 0 ||
        str_arg(proto, "protocol", &p) < 0 || str_arg(dev, "rdma_devices", &d) < 0 ||
        str_arg(master, "master_server_addr", &ms) < 0)
        return NULL;
    if (ssd || strcmp(tenant, "default") != 0) {
        PySys_WriteStderr("mooncake.store: setup: %s is not available on kvstored\n",
                          ssd ? "enable_ssd_offload" : "a tenant_id other than \"default\"");
        return PyLong_FromLong(KVSMC_NOT_SUPPORTED);
    }
    return do_setup(self, h, m, segsz, bufsz, p, d, ms);
}

static PyObject *Store_init_all(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"protocol", "device_name", "mount_segment_size", NULL};
    const char *proto, *dev;
    unsigned long long size = 16u << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ss|K:init_all", kwlist, &proto, &dev, &size))
        return NULL;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_init_all(s, proto, dev, size);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

/* close() -> 0: disconnects; the object can be set up again (calls until then answer -600). */
static PyObject *Store_close(StoreObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->in_use) {
        PyErr_SetString(PyExc_RuntimeError,
                        "MooncakeDistributedStore.close() while calls are running");
        return NULL;
    }
    mooncake_store_t fresh = mooncake_store_create(), old = self->store;
    if (!fresh) return PyErr_NoMemory();
    self->store = fresh;
    Py_BEGIN_ALLOW_THREADS mooncake_store_destroy(old);
    Py_END_ALLOW_THREADS return PyLong_FromLong(0);
}

static PyObject *Store_health_check(StoreObject *self, PyObject *Py_UNUSED(ignored))
{
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_health_check(s);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

static PyObject *Store_get_hostname(StoreObject *self, PyObject *Py_UNUSED(ignored))
{
    char buf[1024];
    if (mooncake_store_get_hostname(self->store, buf, sizeof(buf)) != 0) buf[0] = '\0';
    return PyUnicode_FromString(buf); /* "" before setup, as Mooncake's empty hostname */
}

/* ---- put ---- */

/*
 * A put overwrites a key that exists (kvs_put), which is what Mooncake's
 * upsert calls do, so each upsert method is its put method under its own
 * name (format: the argument format and the name errors show).
 */

/* put(key, value, config=ReplicateConfig()) -> 0 or a negative code */
static PyObject *put_value(StoreObject *self, PyObject *args, PyObject *kwds, const char *format)
{
    static char *kwlist[] = {"key", "value", "config", NULL};
    PyObject *keyobj, *cfgobj = NULL;
    Py_buffer val;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &keyobj, &val, &cfgobj))
        return NULL;
    mooncake_replicate_config_t cfg;
    int raised, rc = config_of(cfgobj, &cfg, &raised);
    const char *key = raised ? NULL : key_of(keyobj);
    if (!key) {
        PyBuffer_Release(&val);
        return NULL;
    }
    if (rc == 0) {
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS rc = mooncake_store_put(s, key, val.buf, (size_t)val.len, &cfg);
        Py_END_ALLOW_THREADS leave(self);
    }
    PyBuffer_Release(&val);
    return PyLong_FromLong(rc);
}

static PyObject *Store_put(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_value(self, args, kwds, "Oy*|O:put");
}

static PyObject *Store_upsert(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_value(self, args, kwds, "Oy*|O:upsert");
}

/* put_from(key, buffer_ptr, size, config=ReplicateConfig()) -> 0 or a negative code */
static PyObject *put_from_one(StoreObject *self, PyObject *args, PyObject *kwds, const char *format)
{
    static char *kwlist[] = {"key", "buffer_ptr", "size", "config", NULL};
    PyObject *keyobj, *ptrobj, *sizeobj, *cfgobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &keyobj, &ptrobj, &sizeobj,
                                     &cfgobj))
        return NULL;
    uint64_t ptr, size;
    mooncake_replicate_config_t cfg;
    int raised, rc = config_of(cfgobj, &cfg, &raised);
    const char *key = raised ? NULL : key_of(keyobj);
    if (!key || uint_of(ptrobj, &ptr) < 0 || uint_of(sizeobj, &size) < 0) return NULL;
    if (rc == 0) {
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS rc =
            mooncake_store_put_from(s, key, (void *)(uintptr_t)ptr, (size_t)size, &cfg);
        Py_END_ALLOW_THREADS leave(self);
    }
    return PyLong_FromLong(rc);
}

static PyObject *Store_put_from(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_from_one(self, args, kwds, "OOO|O:put_from");
}

static PyObject *Store_upsert_from(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_from_one(self, args, kwds, "OOO|O:upsert_from");
}

/* put_parts(key, *parts, config=ReplicateConfig()) -> 0 or a negative code: one value, gathered */
static PyObject *put_parts(StoreObject *self, PyObject *args, PyObject *kwds, const char *name)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    PyObject *cfgobj = kwds ? PyDict_GetItemString(kwds, "config") : NULL;
    if (nargs < 1 || (kwds && PyDict_GET_SIZE(kwds) > (cfgobj ? 1 : 0))) {
        PyErr_Format(PyExc_TypeError, "%s(key, *parts, config=ReplicateConfig())", name);
        return NULL;
    }
    mooncake_replicate_config_t cfg;
    int raised, rc = config_of(cfgobj, &cfg, &raised);
    const char *key = raised ? NULL : key_of(PyTuple_GET_ITEM(args, 0));
    if (!key) return NULL;
    Py_ssize_t nparts = nargs - 1, got = 0;
    Py_buffer *views = PyMem_Calloc((size_t)nparts + 1, sizeof(*views));
    struct iovec *iov = PyMem_Calloc((size_t)nparts + 1, sizeof(*iov));
    PyObject *res = NULL;
    if (!views || !iov) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < nparts; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got + 1), &views[got], PyBUF_CONTIG_RO) < 0)
            goto out;
        if (views[got].ndim > 1 || views[got].itemsize != 1) {
            got++;
            PyErr_SetString(PyExc_RuntimeError, "parts must be 1-D bytes-like");
            goto out;
        }
        iov[got] = (struct iovec){views[got].buf, (size_t)views[got].len};
    }
    if (rc == 0) {
        const struct iovec *const iovs[1] = {iov};
        const size_t niov[1] = {(size_t)nparts};
        int one;
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS rc = kvsmc_batch_put_parts(s, 1, &key, iovs, niov, &cfg, &one);
        Py_END_ALLOW_THREADS leave(self);
        if (rc == 0) rc = one;
    }
    res = PyLong_FromLong(rc);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(iov);
    PyMem_Free(views);
    return res;
}

static PyObject *Store_put_parts(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_parts(self, args, kwds, "put_parts");
}

static PyObject *Store_upsert_parts(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_parts(self, args, kwds, "upsert_parts");
}

/* A batch put (multi: gathered from b->iovs) without the GIL; 0 or a code for the whole call. */
static int put_batch_nogil(mooncake_store_t s, struct batch *b,
                           const mooncake_replicate_config_t *cfg, int multi)
{
    if (multi)
        return kvsmc_batch_put_parts(s, (size_t)b->n, b->keys, (const struct iovec *const *)b->iovs,
                                     b->niov, cfg, b->res);
    return mooncake_store_batch_put_from(s, b->keys, b->ptrs, b->sizes, (size_t)b->n, cfg, b->res);
}

/* Runs a batch put; the per-key results, or the call's code for every key. */
static PyObject *put_batch_common(StoreObject *self, struct batch *b,
                                  const mooncake_replicate_config_t *cfg, int multi)
{
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = put_batch_nogil(s, b, cfg, multi);
    Py_END_ALLOW_THREADS leave(self);
    if (rc < 0) return repeat_list(b->n, rc);
    return result_list(b, 0);
}

/*
 * batch_put_from(keys, buffer_ptrs, sizes, config=ReplicateConfig()) and
 * (multi) batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes,
 * config) -> [0 or code per key]: the same call, one buffer or a segment
 * list per key.
 */
static PyObject *put_from_call(StoreObject *self, PyObject *args, PyObject *kwds, int multi,
                               const char *format)
{
    static char *one[] = {"keys", "buffer_ptrs", "sizes", "config", NULL};
    static char *lists[] = {"keys", "all_buffer_ptrs", "all_sizes", "config", NULL};
    PyObject *keys, *ptrs, *sizes, *cfgobj = NULL, *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, multi ? lists : one, &keys, &ptrs, &sizes,
                                     &cfgobj))
        return NULL;
    mooncake_replicate_config_t cfg;
    int raised, code = config_of(cfgobj, &cfg, &raised);
    if (raised) return NULL;
    struct batch b;
    if (batch_keys(&b, keys) == 0) {
        int rc = multi ? batch_segments(&b, ptrs, sizes) : batch_ptrs(&b, ptrs, sizes);
        if (rc == 0 && code == 0)
            res = put_batch_common(self, &b, &cfg, multi);
        else if (rc >= 0)
            res = repeat_list(b.n, rc ? KVSMC_INVALID_PARAMS : code);
    }
    batch_free(&b);
    return res;
}

static PyObject *Store_batch_put_from(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_from_call(self, args, kwds, 0, "OOO|O:batch_put_from");
}

static PyObject *Store_batch_upsert_from(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_from_call(self, args, kwds, 0, "OOO|O:batch_upsert_from");
}

static PyObject *Store_batch_put_from_multi_buffers(StoreObject *self, PyObject *args,
                                                    PyObject *kwds)
{
    return put_from_call(self, args, kwds, 1, "OOO|O:batch_put_from_multi_buffers");
}

/* put_batch(keys, values, config=ReplicateConfig()) -> 0, or the first key's negative code */
static PyObject *put_batch(StoreObject *self, PyObject *args, PyObject *kwds, const char *format)
{
    static char *kwlist[] = {"keys", "values", "config", NULL};
    PyObject *keys, *vals, *cfgobj = NULL, *valt = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &keys, &vals, &cfgobj))
        return NULL;
    mooncake_replicate_config_t cfg;
    int raised, rc = config_of(cfgobj, &cfg, &raised);
    if (raised) return NULL;
    struct batch b;
    PyObject *res = NULL;
    if (batch_keys(&b, keys) < 0 || !(valt = tuple_of(vals, "values"))) goto out;
    if (PyTuple_GET_SIZE(valt) != b.n) {
        res = PyLong_FromLong(KVSMC_INVALID_PARAMS);
        goto out;
    }
    b.views = PyMem_Calloc((size_t)b.n + 1, sizeof(*b.views));
    if (!b.views) {
        PyErr_NoMemory();
        goto out;
    }
    for (; b.nviews < b.n; b.nviews++) {
        Py_buffer *v = &b.views[b.nviews];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(valt, b.nviews), v, PyBUF_SIMPLE) < 0) goto out;
        b.ptrs[b.nviews] = v->buf;
        b.sizes[b.nviews] = (size_t)v->len;
    }
    if (rc == 0) {
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS rc =
            mooncake_store_batch_put_from(s, b.keys, b.ptrs, b.sizes, (size_t)b.n, &cfg, b.res);
        Py_END_ALLOW_THREADS leave(self);
        for (Py_ssize_t i = 0; rc == 0 && i < b.n; i++)
            rc = b.res[i];
    }
    res = PyLong_FromLong(rc);
out:
    Py_XDECREF(valt);
    batch_free(&b);
    return res;
}

static PyObject *Store_put_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_batch(self, args, kwds, "OO|O:put_batch");
}

static PyObject *Store_upsert_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return put_batch(self, args, kwds, "OO|O:upsert_batch");
}

/* ---- get ---- */

/* get_into(key, buffer_ptr, size) -> the value's length or a negative code */
static PyObject *Store_get_into(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *keyobj, *ptrobj, *sizeobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:get_into", kwlist, &keyobj, &ptrobj,
                                     &sizeobj))
        return NULL;
    uint64_t ptr, size;
    const char *key = key_of(keyobj);
    if (!key || uint_of(ptrobj, &ptr) < 0 || uint_of(sizeobj, &size) < 0) return NULL;
    mooncake_store_t s = enter(self);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS n =
        mooncake_store_get_into(s, key, (void *)(uintptr_t)ptr, (size_t)size);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLongLong(n);
}

/*
 * One key's value as new bytes, or NULL without an exception when it is
 * absent or cannot be read (*code says why), or NULL with an exception.
 * One round trip when the value fits the last length seen, else three.
 */
static PyObject *get_value(StoreObject *self, const char *key, int64_t *code)
{
    size_t cap = self->hint > 0 ? (size_t)self->hint : 4096;
    for (int attempt = 0; attempt < 4; attempt++) {
        PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
        if (!out) return NULL;
        size_t needed = 0;
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS *code =
            kvsmc_get_into_len(s, key, PyBytes_AS_STRING(out), cap, &needed);
        Py_END_ALLOW_THREADS leave(self);
        if (*code >= 0) {
            if (*code > 0) self->hint = (Py_ssize_t)*code;
            if ((size_t)*code != cap && _PyBytes_Resize(&out, (Py_ssize_t)*code) < 0) return NULL;
            return out;
        }
        Py_DECREF(out);
        if (needed == 0) return NULL; /* absent, or an error: not a size problem */
        cap = needed;
    }
    return NULL; /* the value kept growing under us; *code says -600 */
}

/* get(key) -> bytes; b"" when the key is absent or cannot be read (as Mooncake) */
static PyObject *Store_get(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *keyobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get", kwlist, &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    int64_t code;
    PyObject *v = get_value(self, key, &code);
    if (v || PyErr_Occurred()) return v;
    return PyBytes_FromStringAndSize(NULL, 0);
}

/* get_buffer(key) -> bytes, or None when absent (LMCache reads it through memoryview) */
static PyObject *Store_get_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *keyobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_buffer", kwlist, &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    int64_t code;
    PyObject *v = get_value(self, key, &code);
    if (v || PyErr_Occurred()) return v;
    Py_RETURN_NONE;
}

/*
 * The values of a batch as a list of bytes (missing: `absent`, a new
 * reference each). One batch probes the lengths, one batch reads the
 * values; a key whose value changed size between the two is read again alone.
 */
static PyObject *get_values(StoreObject *self, PyObject *keys, PyObject *absent)
{
    struct batch b;
    PyObject *list = NULL, *vals = NULL;
    if (batch_keys(&b, keys) < 0) goto out;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kvsmc_batch_get_size(s, (size_t)b.n, b.keys, b.res64);
    Py_END_ALLOW_THREADS leave(self);
    if (!(vals = PyList_New(b.n))) goto out;
    for (Py_ssize_t i = 0; i < b.n; i++) { /* a bytes object of each length found */
        int64_t len = rc == 0 ? b.res64[i] : rc;
        PyObject *v = len >= 0 ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len) : absent;
        if (!v) goto out;
        if (len < 0) Py_INCREF(v);
        PyList_SET_ITEM(vals, i, v);
        b.ptrs[i] = len > 0 ? PyBytes_AS_STRING(v) : NULL;
        b.sizes[i] = len > 0 ? (size_t)len : 0;
    }
    s = enter(self);
    Py_BEGIN_ALLOW_THREADS rc =
        mooncake_store_batch_get_into(s, b.keys, b.ptrs, b.sizes, (size_t)b.n, b.res64);
    Py_END_ALLOW_THREADS leave(self);
    for (Py_ssize_t i = 0; i < b.n; i++) {
        PyObject *v = PyList_GET_ITEM(vals, i);
        if (v == absent) continue;
        int64_t got = rc == 0 ? b.res64[i] : rc;
        if (got >= 0 && (size_t)got == b.sizes[i]) continue;
        PyObject *again = NULL;
        if (got == KVSMC_INVALID_PARAMS || got >= 0) { /* it grew or shrank meanwhile */
            int64_t code;
            again = get_value(self, b.keys[i], &code);
            if (!again && PyErr_Occurred()) goto out;
        }
        if (!again) {
            again = absent;
            Py_INCREF(again);
        }
        PyList_SetItem(vals, i, again);
    }
    list = vals;
    vals = NULL;
out:
    Py_XDECREF(vals);
    batch_free(&b);
    return list;
}

/* get_batch(keys) -> [bytes per key; b"" when absent] */
static PyObject *Store_get_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys, *empty, *res;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_batch", kwlist, &keys)) return NULL;
    if (!(empty = PyBytes_FromStringAndSize(NULL, 0))) return NULL;
    res = get_values(self, keys, empty);
    Py_DECREF(empty);
    return res;
}

/* batch_get_buffer(keys) -> [bytes or None per key] */
static PyObject *Store_batch_get_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_get_buffer", kwlist, &keys)) return NULL;
    return get_values(self, keys, Py_None);
}

/* A batch get (multi: scattered into b->iovs) without the GIL; 0 or a code for the whole call. */
static int get_batch_nogil(mooncake_store_t s, struct batch *b, int multi)
{
    if (multi)
        return kvsmc_batch_get_parts(s, (size_t)b->n, b->keys, (const struct iovec *const *)b->iovs,
                                     b->niov, b->res64);
    return mooncake_store_batch_get_into(s, b->keys, b->ptrs, b->sizes, (size_t)b->n, b->res64);
}

/*
 * batch_get_into(keys, buffer_ptrs, sizes) and (multi)
 * batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes,
 * prefer_alloc_in_same_node=False) -> [length or code per key]: the same
 * call, one buffer or a segment list per key (each value scattered over its
 * key's buffers, in order).
 */
static PyObject *get_into_call(StoreObject *self, PyObject *args, PyObject *kwds, int multi)
{
    static char *one[] = {"keys", "buffer_ptrs", "sizes", NULL};
    static char *lists[] = {"keys", "all_buffer_ptrs", "all_sizes", "prefer_alloc_in_same_node",
                            NULL};
    PyObject *keys, *ptrs, *sizes, *res = NULL;
    int same_node = 0; /* accepted, no effect */
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, multi ? "OOO|p:batch_get_into_multi_buffers" : "OOO:batch_get_into",
            multi ? lists : one, &keys, &ptrs, &sizes, &same_node))
        return NULL;
    struct batch b;
    if (batch_keys(&b, keys) == 0) {
        int rc = multi ? batch_segments(&b, ptrs, sizes) : batch_ptrs(&b, ptrs, sizes);
        if (rc == 0) {
            mooncake_store_t s = enter(self);
            Py_BEGIN_ALLOW_THREADS rc = get_batch_nogil(s, &b, multi);
            Py_END_ALLOW_THREADS leave(self);
            res = rc < 0 ? repeat_list(b.n, rc) : result_list(&b, 1);
        } else if (rc > 0) {
            res = repeat_list(b.n, KVSMC_INVALID_PARAMS);
        }
    }
    batch_free(&b);
    return res;
}

static PyObject *Store_batch_get_into(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return get_into_call(self, args, kwds, 0);
}

static PyObject *Store_batch_get_into_multi_buffers(StoreObject *self, PyObject *args,
                                                    PyObject *kwds)
{
    return get_into_call(self, args, kwds, 1);
}

/* ---- existence, size, removal ---- */

/* is_exist(key) -> 1, 0, or a negative code */
static PyObject *Store_is_exist(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *keyobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:is_exist", kwlist, &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_is_exist(s, key);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

/* batch_is_exist(keys) -> [1, 0 or a negative code per key] */
static PyObject *Store_batch_is_exist(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys, *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_is_exist", kwlist, &keys)) return NULL;
    struct batch b;
    if (batch_keys(&b, keys) == 0) {
        mooncake_store_t s = enter(self);
        int rc;
        Py_BEGIN_ALLOW_THREADS rc = mooncake_store_batch_is_exist(s, b.keys, (size_t)b.n, b.res);
        Py_END_ALLOW_THREADS leave(self);
        res = rc < 0 ? repeat_list(b.n, rc) : result_list(&b, 0);
    }
    batch_free(&b);
    return res;
}

/* get_size(key) -> the value's length or a negative code */
static PyObject *Store_get_size(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *keyobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_size", kwlist, &keyobj)) return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    mooncake_store_t s = enter(self);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS n = mooncake_store_get_size(s, key);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLongLong(n);
}

/* remove(key, force=False) -> 0 or a negative code */
static PyObject *Store_remove(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"key", "force", NULL};
    PyObject *keyobj;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:remove", kwlist, &keyobj, &force))
        return NULL;
    const char *key = key_of(keyobj);
    if (!key) return NULL;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_remove(s, key, force);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

/* Removes each key of b in turn (kvstored has no batch remove), without the GIL. */
static void remove_each_nogil(mooncake_store_t s, struct batch *b, int force)
{
    for (Py_ssize_t i = 0; i < b->n; i++)
        b->res[i] = mooncake_store_remove(s, b->keys[i], force);
}

/* batch_remove(keys, force=False) -> [0 or a negative code per key] */
static PyObject *Store_batch_remove(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", "force", NULL};
    PyObject *keys, *res = NULL;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:batch_remove", kwlist, &keys, &force))
        return NULL;
    struct batch b;
    if (batch_keys(&b, keys) == 0) {
        mooncake_store_t s = enter(self);
        Py_BEGIN_ALLOW_THREADS remove_each_nogil(s, &b, force);
        Py_END_ALLOW_THREADS leave(self);
        res = result_list(&b, 0);
    }
    batch_free(&b);
    return res;
}

/* remove_by_regex(regex_pattern, force=False) -> the number removed or a negative code */
static PyObject *Store_remove_by_regex(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"regex_pattern", "force", NULL};
    const char *pattern;
    Py_ssize_t plen;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s#|p:remove_by_regex", kwlist, &pattern, &plen,
                                     &force))
        return NULL;
    if ((size_t)plen != strlen(pattern)) return PyLong_FromLong(KVSMC_INVALID_PARAMS);
    mooncake_store_t s = enter(self);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS n = mooncake_store_remove_by_regex(s, pattern, force);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLongLong(n);
}

/* remove_all(force=False) -> the number removed or a negative code */
static PyObject *Store_remove_all(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:remove_all", kwlist, &force)) return NULL;
    mooncake_store_t s = enter(self);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS n = mooncake_store_remove_all(s, force);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLongLong(n);
}

/* ---- buffer registration ---- */

static PyObject *Store_register_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_ptr", "size", NULL};
    PyObject *ptrobj, *sizeobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:register_buffer", kwlist, &ptrobj, &sizeobj))
        return NULL;
    uint64_t ptr, size;
    if (uint_of(ptrobj, &ptr) < 0 || uint_of(sizeobj, &size) < 0) return NULL;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        mooncake_store_register_buffer(s, (void *)(uintptr_t)ptr, (size_t)size);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

static PyObject *Store_unregister_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_ptr", NULL};
    PyObject *ptrobj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:unregister_buffer", kwlist, &ptrobj))
        return NULL;
    uint64_t ptr;
    if (uint_of(ptrobj, &ptr) < 0) return NULL;
    mooncake_store_t s = enter(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mooncake_store_unregister_buffer(s, (void *)(uintptr_t)ptr);
    Py_END_ALLOW_THREADS leave(self);
    return PyLong_FromLong(rc);
}

#define KW(name) (PyCFunction)(void (*)(void)) Store_##name, METH_VARARGS | METH_KEYWORDS

static PyMethodDef Store_methods[] = {
    {"setup", KW(setup),
     "setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol, "
     "rdma_devices, master_server_addr, ...) or setup(config: dict) -> 0 or a negative code. "
     "master_server_addr: the kvstored servers, host:port[,host:port...]"},
    {"init_all", KW(init_all), "init_all(protocol, device_name, mount_segment_size) -> int"},
    {"close", (PyCFunction)Store_close, METH_NOARGS, "close() -> 0"},
    {"health_check", (PyCFunction)Store_health_check, METH_NOARGS,
     "health_check() -> 0 healthy, 1 not set up, 2 a server does not answer"},
    {"get_hostname", (PyCFunction)Store_get_hostname, METH_NOARGS, "get_hostname() -> str"},
    {"put", KW(put), "put(key, value, config=ReplicateConfig()) -> int"},
    {"put_from", KW(put_from), "put_from(key, buffer_ptr, size, config=ReplicateConfig()) -> int"},
    {"put_parts", KW(put_parts), "put_parts(key, *parts, config=ReplicateConfig()) -> int"},
    {"put_batch", KW(put_batch), "put_batch(keys, values, config=ReplicateConfig()) -> int"},
    {"upsert", KW(upsert), "upsert(key, value, config=ReplicateConfig()) -> int (put)"},
    {"upsert_from", KW(upsert_from),
     "upsert_from(key, buffer_ptr, size, config=ReplicateConfig()) -> int (put_from)"},
    {"upsert_parts", KW(upsert_parts),
     "upsert_parts(key, *parts, config=ReplicateConfig()) -> int (put_parts)"},
    {"upsert_batch", KW(upsert_batch),
     "upsert_batch(keys, values, config=ReplicateConfig()) -> int (put_batch)"},
    {"batch_put_from", KW(batch_put_from),
     "batch_put_from(keys, buffer_ptrs, sizes, config=ReplicateConfig()) -> list of int"},
    {"batch_upsert_from", KW(batch_upsert_from),
     "batch_upsert_from(keys, buffer_ptrs, sizes, config=ReplicateConfig()) -> list of int"},
    {"batch_put_from_multi_buffers", KW(batch_put_from_multi_buffers),
     "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config) -> list of int"},
    {"get", KW(get), "get(key) -> bytes (b'' when absent)"},
    {"get_buffer", KW(get_buffer), "get_buffer(key) -> bytes or None"},
    {"get_batch", KW(get_batch), "get_batch(keys) -> list of bytes (b'' when absent)"},
    {"batch_get_buffer", KW(batch_get_buffer), "batch_get_buffer(keys) -> list of bytes or None"},
    {"get_into", KW(get_into), "get_into(key, buffer_ptr, size) -> length or negative code"},
    {"batch_get_into", KW(batch_get_into),
     "batch_get_into(keys, buffer_ptrs, sizes) -> list of length or negative code"},
    {"batch_get_into_multi_buffers", KW(batch_get_into_multi_buffers),
     "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes) -> list of int"},
    {"is_exist", KW(is_exist), "is_exist(key) -> 1, 0 or a negative code"},
    {"batch_is_exist", KW(batch_is_exist), "batch_is_exist(keys) -> list of 1, 0 or code"},
    {"get_size", KW(get_size), "get_size(key) -> length or a negative code"},
    {"remove", KW(remove), "remove(key, force=False) -> int"},
    {"batch_remove", KW(batch_remove), "batch_remove(keys, force=False) -> list of 0 or code"},
    {"remove_by_regex", KW(remove_by_regex), "remove_by_regex(regex_pattern, force=False) -> int"},
    {"remove_all", KW(remove_all), "remove_all(force=False) -> int"},
    {"register_buffer", KW(register_buffer), "register_buffer(buffer_ptr, size) -> int"},
    {"unregister_buffer", KW(unregister_buffer), "unregister_buffer(buffer_ptr) -> int"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.MooncakeDistributedStore",
    .tp_doc = "MooncakeDistributedStore(): Mooncake Store's client API, served by kvstored",
    .tp_basicsize = sizeof(StoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Store_init,
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_methods = Store_methods,
};

static struct PyModuleDef store_module = {
    PyModuleDef_HEAD_INIT, .m_name = "mooncake.store",
    .m_doc = "Mooncake Store's Python API over kvbatch's kvstored (docs/mooncake.md)",
    .m_size = -1};

PyMODINIT_FUNC PyInit_store(void)
{
    if (PyType_Ready(&ConfigType) < 0 || PyType_Ready(&StoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&store_module);
    if (!m) return NULL;
    Py_INCREF(&ConfigType);
    if (PyModule_AddObject(m, "ReplicateConfig", (PyObject *)&ConfigType) < 0) goto fail;
    Py_INCREF(&StoreType);
    if (PyModule_AddObject(m, "MooncakeDistributedStore", (PyObject *)&StoreType) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
