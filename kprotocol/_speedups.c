/* Optional compiled fast path for generated codecs.
 *
 * A Plan runs a small table of field operations (emitted by codegen next to the Python
 * decoders and encoders) for one struct at one version. It handles the common, canonical
 * case only: whenever anything is unusual (a non-empty tagged-field section, a bad length,
 * invalid UTF-8, a value out of range...) it hands the whole struct to the generated Python
 * function, which either handles it or raises the precise DecodeError/EncodeError. So the
 * Python code stays the reference and this file never has to reproduce its error messages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_BOOL, K_INT8, K_INT16, K_INT32, K_INT64, K_UINT16, K_UINT32, K_FLOAT64, K_UUID,
       K_STRING, K_BYTES, K_STRUCT };
enum { OP_FIXED, OP_STRING, OP_BYTES, OP_ARRAY, OP_STRUCT, OP_CONST, OP_TAGS, OP_CHECK };

static const int FIXED_SIZE[] = {1, 1, 2, 4, 8, 2, 4, 8, 16};

typedef struct PlanObject PlanObject;

typedef struct {
    int op, slot, kind, flex, nullable, marker;
    PlanObject *sub; /* borrowed from PlanObject.refs */
    PyObject *value; /* borrowed from PlanObject.refs; a tagged field's default */
    int tag;         /* >= 0: a tagged field, read from the tagged section (these ops follow OP_TAGS) */
} Op;

struct PlanObject {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t nslots;
    Op *ops;
    Py_ssize_t nops;
    PyObject *fallback;
    PyObject *refs; /* the op tuple, keeps subs and values alive */
};

static PyObject *make_uuid = NULL;
/* uuid.UUID(bytes=raw) without its __init__: the class, SafeUUID.unknown, the shared zero UUID. */
static PyTypeObject *uuid_type = NULL;
static PyObject *uuid_unknown = NULL, *zero_uuid = NULL, *s_int = NULL, *s_is_safe = NULL;
static PyObject *empty_tuple = NULL;

/* ------------------------------------------------------------------ decoding */

typedef struct {
    PyObject *src;
    const unsigned char *buf;
    Py_ssize_t len;
} Src;

/* Minimal unsigned varint of at most 5 bytes; -1 on anything else. */
static int read_uvarint(const Src *s, Py_ssize_t *pos, uint32_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= s->len) return -1;
        unsigned char b = s->buf[p++];
        result |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            if (b == 0 && shift) return -1;
            if (result > 0xffffffffu) return -1;
            *out = (uint32_t)result;
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift > 28) return -1;
    }
}

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* NULL without an exception means "not canonical: let Python decide". */
static PyObject *read_fixed(int kind, const unsigned char *p) {
    switch (kind) {
    case K_BOOL:
        if (p[0] == 1) Py_RETURN_TRUE;
        if (p[0] == 0) Py_RETURN_FALSE;
        return NULL;
    case K_INT8: return PyLong_FromLong((int8_t)p[0]);
    case K_INT16: return PyLong_FromLong((int16_t)be(p, 2));
    case K_INT32: return PyLong_FromLong((int32_t)be(p, 4));
    case K_INT64: return PyLong_FromLongLong((int64_t)be(p, 8));
    case K_UINT16: return PyLong_FromLong((long)be(p, 2));
    case K_UINT32: return PyLong_FromUnsignedLong((unsigned long)be(p, 4));
    case K_FLOAT64: {
        uint64_t bits = be(p, 8);
        double d;
        memcpy(&d, &bits, 8);
        return PyFloat_FromDouble(d);
    }
    case K_UUID: {
        if (uuid_type) {  /* what make_uuid gives, built directly: the zero UUID shared, else its two slots */
            static const unsigned char zero[16] = {0};
            if (!memcmp(p, zero, 16)) return Py_NewRef(zero_uuid);
            PyObject *value = _PyLong_FromByteArray(p, 16, 0, 0);
            if (!value) return NULL;
            PyObject *u = uuid_type->tp_alloc(uuid_type, 0);
            int rc = u ? PyObject_GenericSetAttr(u, s_int, value) : -1;
            Py_DECREF(value);
            if (rc < 0 || PyObject_GenericSetAttr(u, s_is_safe, uuid_unknown) < 0) { Py_XDECREF(u); return NULL; }
            return u;
        }
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, 16);
        if (!raw) return NULL;
        PyObject *u = PyObject_CallOneArg(make_uuid, raw);
        Py_DECREF(raw);
        return u;
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad fixed kind");
    return NULL;
}

/* Length prefix of a string/bytes/array: sets *isnull; -1 when not canonical. */
static int read_length(const Src *s, Py_ssize_t *pos, int flex, int width, Py_ssize_t *length, int *isnull) {
    *isnull = 0;
    if (flex) {
        uint32_t n;
        if (read_uvarint(s, pos, &n) < 0) return -1;
        if (n == 0) { *isnull = 1; return 0; }
        *length = (Py_ssize_t)n - 1;
        return 0;
    }
    if (*pos + width > s->len) return -1;
    int64_t v = width == 2 ? (int16_t)be(s->buf + *pos, 2) : (int32_t)be(s->buf + *pos, 4);
    *pos += width;
    if (v == -1) { *isnull = 1; return 0; }
    if (v < -1) return -1;
    *length = (Py_ssize_t)v;
    return 0;
}

static PyObject *read_string(const Src *s, Py_ssize_t *pos, int flex, int nullable) {
    Py_ssize_t n = 0;
    int isnull;
    if (read_length(s, pos, flex, 2, &n, &isnull) < 0) return NULL;
    if (isnull) {
        if (!nullable) return NULL;
        Py_RETURN_NONE;
    }
    if (n > 0x7fff || *pos + n > s->len) return NULL;
    const unsigned char *p = s->buf + *pos;
    Py_ssize_t i = 0;
    uint64_t high = 0, word;
    for (; i + 8 <= n; i += 8) {
        memcpy(&word, p + i, 8);
        high |= word;
    }
    high &= 0x8080808080808080ull;
    while (i < n && !high) high = p[i++] & 0x80;
    if (!high) {  /* ASCII, the usual case: copied without the UTF-8 decoder */
        PyObject *a = PyUnicode_New(n, 127);
        if (!a) return NULL;
        memcpy(PyUnicode_1BYTE_DATA(a), p, n);
        *pos += n;
        return a;
    }
    PyObject *r = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (!r) { PyErr_Clear(); return NULL; }
    *pos += n;
    return r;
}

static PyObject *read_bytes(const Src *s, Py_ssize_t *pos, int flex, int nullable) {
    Py_ssize_t n = 0;
    int isnull;
    if (read_length(s, pos, flex, 4, &n, &isnull) < 0) return NULL;
    if (isnull) {
        if (!nullable) return NULL;
        Py_RETURN_NONE;
    }
    if (*pos + n > s->len) return NULL;
    PyObject *r = PyBytes_FromStringAndSize((const char *)s->buf + *pos, n);
    *pos += n;
    return r;
}

static PyObject *decode_struct(PlanObject *pl, const Src *s, Py_ssize_t *pos);

/* Decoded values are immutable trees, built bottom-up: a decoded struct or array holds ints, strings,
 * bytes, UUIDs and other decoded values, none of which can refer back to it, so no decoded value can
 * be part of a reference cycle. They are left out of the cyclic collector (CPython does the same for
 * plain tuples of untracked values at its next collection): a message of many small structs then
 * costs the collector nothing, instead of being traversed and promoted through its generations. */

static PyObject *read_element(const Op *op, const Src *s, Py_ssize_t *pos) {
    int kind = op->kind;
    if (kind <= K_UUID) {
        if (*pos + FIXED_SIZE[kind] > s->len) return NULL;
        PyObject *v = read_fixed(kind, s->buf + *pos);
        if (v) *pos += FIXED_SIZE[kind];
        return v;
    }
    if (kind == K_STRING) return read_string(s, pos, op->flex, 0);
    if (kind == K_BYTES) return read_bytes(s, pos, op->flex, 0);
    return decode_struct(op->sub, s, pos);
}

static PyObject *read_array(const Op *op, const Src *s, Py_ssize_t *pos) {
    Py_ssize_t n = 0;
    int isnull;
    if (read_length(s, pos, op->flex, 4, &n, &isnull) < 0) return NULL;
    if (isnull) {
        if (!op->nullable) return NULL;
        Py_RETURN_NONE;
    }
    if (n > s->len - *pos) return NULL;
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = read_element(op, s, pos);
        if (!v) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, v);
    }
    PyObject_GC_UnTrack(t);  /* see "Decoded values are immutable trees" */
    return t;
}

/* One field's value (every op but OP_CONST and OP_TAGS); NULL without an exception: not canonical. */
static inline __attribute__((always_inline)) PyObject *read_field(const Op *op, const Src *s, Py_ssize_t *pos) {
    PyObject *v = NULL;
    switch (op->op) {
    case OP_FIXED:
        if (*pos + FIXED_SIZE[op->kind] > s->len) break;
        v = read_fixed(op->kind, s->buf + *pos);
        if (v) *pos += FIXED_SIZE[op->kind];
        break;
    case OP_STRING: v = read_string(s, pos, op->flex, op->nullable); break;
    case OP_BYTES: v = read_bytes(s, pos, op->flex, op->nullable); break;
    case OP_ARRAY: v = read_array(op, s, pos); break;
    case OP_STRUCT:
        if (op->marker >= 0) {
            if (*pos >= s->len) break;
            unsigned char m = s->buf[*pos];
            if (m == op->marker) { (*pos)++; v = Py_NewRef(Py_None); break; }
            if (m != 1) break;
            (*pos)++;
        }
        v = decode_struct(op->sub, s, pos);
        break;
    }
    return v;
}

#define MAX_TAGS 32
typedef struct { uint32_t tag; Py_ssize_t start, end; } TagAt;

/* The tagged section (the op at `at` is OP_TAGS): the unknown tags as ((tag, bytes), ...), where
 * the known ones are (in `found`, for the tagged ops after it). Tags in increasing order only. */
static PyObject *read_tags(PlanObject *pl, Py_ssize_t at, const Src *s, Py_ssize_t *pos, TagAt *found,
                           int *nfound) {
    if (*pos >= s->len) return NULL;
    if (s->buf[*pos] == 0) { (*pos)++; return Py_NewRef(empty_tuple); }
    uint32_t n;
    if (read_uvarint(s, pos, &n) < 0 || n > s->len - *pos) return NULL;
    PyObject *unknown = NULL;
    int64_t last = -1;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t tag, size;
        if (read_uvarint(s, pos, &tag) < 0 || read_uvarint(s, pos, &size) < 0 || (int64_t)tag <= last ||
            size > s->len - *pos) goto irregular;
        last = tag;
        int known = 0;
        for (Py_ssize_t j = at + 1; j < pl->nops && !known; j++)
            known = pl->ops[j].tag >= 0 && (uint32_t)pl->ops[j].tag == tag;
        if (known) {
            if (*nfound == MAX_TAGS) goto irregular;
            found[(*nfound)++] = (TagAt){tag, *pos, *pos + (Py_ssize_t)size};
        } else {
            if (!unknown && !(unknown = PyList_New(0))) return NULL;
            PyObject *item = Py_BuildValue("(Iy#)", tag, (const char *)s->buf + *pos, (Py_ssize_t)size);
            if (!item || PyList_Append(unknown, item) < 0) { Py_XDECREF(item); Py_DECREF(unknown); return NULL; }
            Py_DECREF(item);
        }
        *pos += size;
    }
    if (!unknown) return Py_NewRef(empty_tuple);
    PyObject *t = PyList_AsTuple(unknown);
    Py_DECREF(unknown);
    return t;
irregular:
    Py_XDECREF(unknown);
    return NULL;
}

/* A tagged field: its default when absent, else its value read within the tag's bytes (exactly).
 * A value equal to the default is kept as an unknown tag by the Python decoder: not canonical. */
static PyObject *read_tagged(const Op *op, const Src *s, const TagAt *found, int nfound) {
    for (int k = 0; k < nfound; k++) {
        if (found[k].tag != (uint32_t)op->tag) continue;
        Src within = {s->src, s->buf, found[k].end};
        Py_ssize_t p = found[k].start;
        PyObject *v = read_field(op, &within, &p);
        if (!v) return NULL;
        int same = p == found[k].end ? PyObject_RichCompareBool(v, op->value, Py_EQ) : 1;
        if (same) {
            Py_DECREF(v);
            if (same < 0) PyErr_Clear();
            return NULL;
        }
        return v;
    }
    return Py_NewRef(op->value);
}

/* Run the ops; NULL without an exception asks for the Python fallback. */
static PyObject *decode_ops(PlanObject *pl, const Src *s, Py_ssize_t *pos) {
    /* Allocated untracked (see "Decoded values are immutable trees"): the plan class is a tuple
     * subclass without __dict__ or other slots (checked in Plan_new), laid out as a tuple. */
    PyObject *obj = (PyObject *)_PyObject_GC_NewVar(pl->cls, pl->nslots);
    if (!obj) return NULL;
    memset(((PyTupleObject *)obj)->ob_item, 0, pl->nslots * sizeof(PyObject *));
    TagAt found[MAX_TAGS];
    int nfound = 0;
    for (Py_ssize_t i = 0; i < pl->nops; i++) {
        const Op *op = &pl->ops[i];
        PyObject *v;
        if (op->tag >= 0) v = read_tagged(op, s, found, nfound);
        else if (op->op == OP_CONST) v = Py_NewRef(op->value);
        else if (op->op == OP_TAGS) v = read_tags(pl, i, s, pos, found, &nfound);
        else v = read_field(op, s, pos);
        if (!v) { Py_DECREF(obj); return NULL; }
        PyTuple_SET_ITEM(obj, op->slot, v);
    }
    return obj;
}

static PyObject *decode_struct(PlanObject *pl, const Src *s, Py_ssize_t *pos) {
    Py_ssize_t start = *pos;
    PyObject *obj = decode_ops(pl, s, pos);
    if (obj || PyErr_Occurred()) return obj;
    PyObject *r = PyObject_CallFunction(pl->fallback, "On", s->src, start);
    if (!r) return NULL;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "fallback decoder must return (value, pos)");
        return NULL;
    }
    Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    if (end == -1 && PyErr_Occurred()) { Py_DECREF(r); return NULL; }
    if (end < start) {  /* a fallback may only move forward */
        Py_DECREF(r);
        PyErr_Format(PyExc_SystemError, "fallback decoder returned position %zd before %zd", end, start);
        return NULL;
    }
    if (end > s->len) {  /* past the bytes of a tagged field: its whole struct goes to Python */
        Py_DECREF(r);
        return NULL;
    }
    obj = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    *pos = end;
    Py_DECREF(r);
    return obj;
}

/* ------------------------------------------------------------------ encoding */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int reserve(Out *o, Py_ssize_t n) {
    if (o->len + n <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n) cap *= 2;
    char *b = PyMem_Realloc(o->buf, cap);
    if (!b) { PyErr_NoMemory(); return -1; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const void *data, Py_ssize_t n) {
    if (reserve(o, n) < 0) return -1;
    memcpy(o->buf + o->len, data, n);
    o->len += n;
    return 0;
}

static int put_be(Out *o, uint64_t v, int n) {
    if (reserve(o, n) < 0) return -1;
    for (int i = n - 1; i >= 0; i--) { o->buf[o->len + i] = (char)(v & 0xff); v >>= 8; }
    o->len += n;
    return 0;
}

static int put_uvarint(Out *o, uint64_t v) {
    if (reserve(o, 10) < 0) return -1;
    while (v >= 0x80) { o->buf[o->len++] = (char)((v & 0x7f) | 0x80); v >>= 7; }
    o->buf[o->len++] = (char)v;
    return 0;
}

/* 0 written, 1 not canonical (Python decides), -1 error. */
#define ANOMALY 1

static int write_fixed(Out *o, int kind, PyObject *v) {
    if (kind == K_BOOL) {
        if (v == Py_True) return put_be(o, 1, 1);
        if (v == Py_False) return put_be(o, 0, 1);
        return ANOMALY;
    }
    if (kind == K_FLOAT64) {
        if (!PyFloat_Check(v)) return ANOMALY;
        double d = PyFloat_AS_DOUBLE(v);
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return put_be(o, bits, 8);
    }
    if (kind == K_UUID) {
        PyObject *raw = PyObject_GetAttrString(v, "bytes");
        if (!raw) { PyErr_Clear(); return ANOMALY; }
        int rc = ANOMALY;
        if (PyBytes_Check(raw) && PyBytes_GET_SIZE(raw) == 16) rc = put(o, PyBytes_AS_STRING(raw), 16);
        Py_DECREF(raw);
        return rc;
    }
    if (!PyLong_Check(v)) return ANOMALY;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return ANOMALY; }
    switch (kind) {
    case K_INT8: if (x < -128 || x > 127) return ANOMALY; return put_be(o, (uint64_t)x, 1);
    case K_INT16: if (x < -32768 || x > 32767) return ANOMALY; return put_be(o, (uint64_t)x, 2);
    case K_INT32: if (x < INT32_MIN || x > INT32_MAX) return ANOMALY; return put_be(o, (uint64_t)x, 4);
    case K_INT64: return put_be(o, (uint64_t)x, 8);
    case K_UINT16: if (x < 0 || x > 0xffff) return ANOMALY; return put_be(o, (uint64_t)x, 2);
    case K_UINT32: if (x < 0 || x > 0xffffffffLL) return ANOMALY; return put_be(o, (uint64_t)x, 4);
    }
    PyErr_SetString(PyExc_SystemError, "bad fixed kind");
    return -1;
}

static int put_length(Out *o, int flex, int width, Py_ssize_t n) {
    if (flex) return put_uvarint(o, (uint64_t)n + 1);
    return put_be(o, (uint64_t)(int64_t)n, width);
}

static int put_null(Out *o, int flex, int width) {
    if (flex) return put_be(o, 0, 1);
    return put_be(o, UINT64_MAX, width);
}

static int write_string(Out *o, PyObject *v, int flex, int nullable) {
    if (v == Py_None) return nullable ? put_null(o, flex, 2) : ANOMALY;
    if (!PyUnicode_Check(v)) return ANOMALY;
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(v, &n);
    if (!data) { PyErr_Clear(); return ANOMALY; }
    if (n > 0x7fff) return ANOMALY;
    if (put_length(o, flex, 2, n) < 0) return -1;
    return put(o, data, n);
}

static int write_bytes(Out *o, PyObject *v, int flex, int nullable) {
    if (v == Py_None) return nullable ? put_null(o, flex, 4) : ANOMALY;
    if (!PyBytes_Check(v)) return ANOMALY;
    Py_ssize_t n = PyBytes_GET_SIZE(v);
    if (put_length(o, flex, 4, n) < 0) return -1;
    return put(o, PyBytes_AS_STRING(v), n);
}

static int encode_struct(PlanObject *pl, Out *o, PyObject *obj);

static int write_array(Out *o, const Op *op, PyObject *v) {
    if (v == Py_None) return op->nullable ? put_null(o, op->flex, 4) : ANOMALY;
    if (!PyTuple_Check(v) && !PyList_Check(v)) return ANOMALY;
    /* Elements may run Python code (__index__, a struct's fallback encoder) that mutates a list:
       iterate a tuple we own, which keeps every element alive whatever happens to the list. */
    PyObject *seq = PyList_Check(v) ? PyList_AsTuple(v) : Py_NewRef(v);
    if (!seq) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    int rc = put_length(o, op->flex, 4, n) < 0 ? -1 : 0;
    for (Py_ssize_t i = 0; i < n && !rc; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        if (op->kind <= K_UUID) rc = write_fixed(o, op->kind, item);
        else if (op->kind == K_STRING) rc = write_string(o, item, op->flex, 0);
        else if (op->kind == K_BYTES) rc = write_bytes(o, item, op->flex, 0);
        else rc = encode_struct(op->sub, o, item);
    }
    Py_DECREF(seq);
    return rc;
}

static int encode_ops(PlanObject *pl, Out *o, PyObject *obj) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != pl->nslots) return ANOMALY;
    for (Py_ssize_t i = 0; i < pl->nops; i++) {
        const Op *op = &pl->ops[i];
        PyObject *v = PyTuple_GET_ITEM(obj, op->slot);
        int rc = 0;
        switch (op->op) {
        case OP_FIXED: rc = write_fixed(o, op->kind, v); break;
        case OP_STRING: rc = write_string(o, v, op->flex, op->nullable); break;
        case OP_BYTES: rc = write_bytes(o, v, op->flex, op->nullable); break;
        case OP_ARRAY: rc = write_array(o, op, v); break;
        case OP_STRUCT:
            if (op->marker >= 0) {
                if (v == Py_None) { rc = put_be(o, (uint64_t)op->marker, 1); break; }
                if (put_be(o, 1, 1) < 0) return -1;
            }
            rc = encode_struct(op->sub, o, v);
            break;
        case OP_CHECK: {
            int ne = PyObject_RichCompareBool(v, op->value, Py_NE);
            if (ne < 0) { PyErr_Clear(); return ANOMALY; }
            rc = ne ? ANOMALY : 0;
            break;
        }
        case OP_TAGS:
            if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 0) return ANOMALY;
            rc = put_be(o, 0, 1);
            break;
        }
        if (rc) return rc;
    }
    return 0;
}

static int encode_struct(PlanObject *pl, Out *o, PyObject *obj) {
    Py_ssize_t start = o->len;
    int rc = encode_ops(pl, o, obj);
    if (rc <= 0) return rc;
    /* Not canonical for the fast path: let the generated Python encoder write this struct. */
    o->len = start;
    PyObject *parts = PyList_New(0);
    if (!parts) return -1;
    PyObject *append = PyObject_GetAttrString(parts, "append");
    PyObject *r = append ? PyObject_CallFunctionObjArgs(pl->fallback, obj, append, NULL) : NULL;
    Py_XDECREF(append);
    if (!r) { Py_DECREF(parts); return -1; }
    Py_DECREF(r);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, i), &view, PyBUF_SIMPLE) < 0) { Py_DECREF(parts); return -1; }
        int prc = put(o, view.buf, view.len);
        PyBuffer_Release(&view);
        if (prc < 0) { Py_DECREF(parts); return -1; }
    }
    Py_DECREF(parts);
    return 0;
}

/* ------------------------------------------------------------------ Plan type */

static void Plan_dealloc(PlanObject *self) {
    PyObject_GC_UnTrack(self);
    PyMem_Free(self->ops);
    Py_XDECREF(self->cls);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->refs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Plan_traverse(PlanObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->cls);
    Py_VISIT(self->fallback);
    Py_VISIT(self->refs);
    return 0;
}

static PyTypeObject PlanType;

static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *cls, *ops, *fallback;
    Py_ssize_t nslots;
    if (!PyArg_ParseTuple(args, "O!nO!O", &PyType_Type, &cls, &nslots, &PyTuple_Type, &ops, &fallback)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize ||
        ((PyTypeObject *)cls)->tp_itemsize != PyTuple_Type.tp_itemsize || ((PyTypeObject *)cls)->tp_dictoffset ||
        ((PyTypeObject *)cls)->tp_weaklistoffset || !PyType_IS_GC((PyTypeObject *)cls)) {
        PyErr_SetString(PyExc_TypeError, "plan class must be a tuple subclass without __dict__ or other slots");
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->cls = (PyTypeObject *)Py_NewRef(cls);
    self->nslots = nslots;
    self->fallback = Py_NewRef(fallback);
    self->refs = Py_NewRef(ops);
    self->nops = PyTuple_GET_SIZE(ops);
    self->ops = PyMem_Calloc(self->nops ? self->nops : 1, sizeof(Op));
    if (!self->ops) { Py_DECREF(self); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < self->nops; i++) {
        PyObject *t = PyTuple_GET_ITEM(ops, i);
        Op *op = &self->ops[i];
        PyObject *sub, *value;
        op->tag = -1;
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "iiiiiiOO|i", &op->op, &op->slot, &op->kind, &op->flex,
                                                   &op->nullable, &op->marker, &sub, &value, &op->tag)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad op");
            Py_DECREF(self);
            return NULL;
        }
        if (op->slot < 0 || op->slot >= nslots || op->op < OP_FIXED || op->op > OP_CHECK ||
            op->kind < K_BOOL || op->kind > K_STRUCT) {
            PyErr_Format(PyExc_ValueError, "op %zd out of range", i);
            Py_DECREF(self);
            return NULL;
        }
        if (sub != Py_None) {
            if (!PyObject_TypeCheck(sub, &PlanType)) {
                PyErr_SetString(PyExc_TypeError, "sub must be a Plan");
                Py_DECREF(self);
                return NULL;
            }
            op->sub = (PlanObject *)sub;
        } else if ((op->op == OP_STRUCT) || (op->op == OP_ARRAY && op->kind == K_STRUCT)) {
            PyErr_SetString(PyExc_TypeError, "struct op without a sub plan");
            Py_DECREF(self);
            return NULL;
        }
        op->value = value;
    }
    return (PyObject *)self;
}

static PyObject *Plan_decode(PlanObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode(buf: bytes, pos: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Src s = {args[0], (const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0])};
    if (pos < 0 || pos > s.len) return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    PyObject *obj = decode_struct(self, &s, &pos);
    if (!obj) return NULL;
    PyObject *r = Py_BuildValue("(Nn)", obj, pos);
    return r;
}

/* A scratch buffer reused across calls (when not already in use), so large messages do not
   pay for fresh pages on every encode. */
static Out scratch = {NULL, 0, 0};
static int scratch_busy = 0;

static PyObject *Plan_encode(PlanObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode(obj, write)");
        return NULL;
    }
    int own = !scratch_busy;
    Out local = {NULL, 0, 0};
    Out *o = own ? &scratch : &local;
    scratch_busy = 1;
    o->len = 0;
    int rc = encode_struct(self, o, args[0]);
    PyObject *data = rc < 0 ? NULL : PyBytes_FromStringAndSize(o->buf ? o->buf : "", o->len);
    if (own) {
        scratch_busy = 0;
        if (scratch.cap > (1 << 24)) { PyMem_Free(scratch.buf); scratch = (Out){NULL, 0, 0}; }
    } else {
        PyMem_Free(local.buf);
    }
    if (!data) return NULL;
    PyObject *r = PyObject_CallOneArg(args[1], data);
    Py_DECREF(data);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyMethodDef Plan_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Plan_decode, METH_FASTCALL, "decode(buf, pos) -> (obj, pos)"},
    {"encode", (PyCFunction)(void (*)(void))Plan_encode, METH_FASTCALL, "encode(obj, write) -> None"},
    {NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol._speedups.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Plan(cls, nslots, ops, fallback): compiled codec of one struct at one version.",
    .tp_new = Plan_new,
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_traverse = (traverseproc)Plan_traverse,
    .tp_methods = Plan_methods,
};

static PyObject *configure(PyObject *mod, PyObject *fn) {
    Py_XSETREF(make_uuid, Py_NewRef(fn));
    /* The direct path only where it gives what make_uuid gives: uuid.UUID with its usual slots. */
    Py_CLEAR(uuid_type);
    PyObject *module = PyImport_ImportModule("uuid");
    PyObject *cls = module ? PyObject_GetAttrString(module, "UUID") : NULL;
    PyObject *safe = module ? PyObject_GetAttrString(module, "SafeUUID") : NULL;
    Py_XDECREF(module);
    PyObject *unknown = safe ? PyObject_GetAttrString(safe, "unknown") : NULL;
    Py_XDECREF(safe);
    PyObject *raw = PyBytes_FromStringAndSize(NULL, 16);
    if (raw) memset(PyBytes_AS_STRING(raw), 0, 16);
    PyObject *zero = raw ? PyObject_CallOneArg(fn, raw) : NULL;
    Py_XDECREF(raw);
    if (!cls || !unknown || !zero || !PyType_Check(cls) || !PyObject_TypeCheck(zero, (PyTypeObject *)cls)) {
        Py_XDECREF(cls); Py_XDECREF(unknown); Py_XDECREF(zero);
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!s_int && !(s_int = PyUnicode_InternFromString("int"))) return NULL;
    if (!s_is_safe && !(s_is_safe = PyUnicode_InternFromString("is_safe"))) return NULL;
    uuid_type = (PyTypeObject *)cls;
    Py_XSETREF(uuid_unknown, unknown);
    Py_XSETREF(zero_uuid, zero);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ to_json
 * to_json(obj, version, plans, build, special): Kafka's JSON shape of a generated struct.
 * `plans` caches, per (type, version), a tuple of (index, key, code, tagged, default, kind)
 * entries; `build(cls, version)` makes a missing one; `special(kind, value, version)` converts
 * bytes, records, uuids and floats. Codes as in kprotocol.runtime.json_codec. */

enum { J_PLAIN, J_STRUCT, J_STRUCT_ARRAY, J_PLAIN_ARRAY, J_SPECIAL_ARRAY, J_SPECIAL };

static PyObject *json_struct(PyObject *obj, PyObject *version, PyObject *plans, PyObject *build, PyObject *special,
                             int depth);

static PyObject *json_plan(PyObject *obj, PyObject *version, PyObject *plans, PyObject *build) {
    PyObject *key = PyTuple_Pack(2, (PyObject *)Py_TYPE(obj), version);
    if (!key) return NULL;
    PyObject *plan = PyDict_GetItemWithError(plans, key);
    Py_DECREF(key);
    if (plan) return Py_NewRef(plan);
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallFunctionObjArgs(build, (PyObject *)Py_TYPE(obj), version, NULL);
}

static PyObject *json_struct(PyObject *obj, PyObject *version, PyObject *plans, PyObject *build, PyObject *special,
                             int depth) {
    if (depth > 64) { PyErr_SetString(PyExc_RecursionError, "structs nested too deeply"); return NULL; }
    if (!PyTuple_Check(obj)) { PyErr_SetString(PyExc_TypeError, "to_json expects a generated struct"); return NULL; }
    PyObject *plan = json_plan(obj, version, plans, build);
    if (!plan) return NULL;
    if (!PyTuple_Check(plan)) { Py_DECREF(plan); PyErr_SetString(PyExc_TypeError, "plan must be a tuple"); return NULL; }
    PyObject *out = PyDict_New();
    if (!out) { Py_DECREF(plan); return NULL; }
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(plan, i);
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
        PyObject *name = PyTuple_GET_ITEM(entry, 1);
        long code = PyLong_AsLong(PyTuple_GET_ITEM(entry, 2));
        int tagged = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 3));
        PyObject *kind = PyTuple_GET_ITEM(entry, 5);
        if (index < 0 || index >= PyTuple_GET_SIZE(obj)) { PyErr_SetString(PyExc_IndexError, "field index"); goto fail; }
        PyObject *value = PyTuple_GET_ITEM(obj, index);
        if (tagged) {
            int same = PyObject_RichCompareBool(value, PyTuple_GET_ITEM(entry, 4), Py_EQ);
            if (same < 0) goto fail;
            if (same) continue;
        }
        PyObject *converted = NULL;
        if (value == Py_None || code == J_PLAIN) {
            converted = Py_NewRef(value);
        } else if (code == J_STRUCT) {
            converted = json_struct(value, version, plans, build, special, depth + 1);
        } else if (code == J_SPECIAL) {
            converted = PyObject_CallFunctionObjArgs(special, kind, value, version, NULL);
        } else {
            PyObject *seq = PySequence_Fast(value, "array field is not a sequence");
            if (!seq) goto fail;
            Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
            converted = PyList_New(m);
            for (Py_ssize_t j = 0; converted && j < m; j++) {
                PyObject *item = PySequence_Fast_GET_ITEM(seq, j), *conv;
                if (code == J_STRUCT_ARRAY) conv = json_struct(item, version, plans, build, special, depth + 1);
                else if (code == J_PLAIN_ARRAY || item == Py_None) conv = Py_NewRef(item);
                else conv = PyObject_CallFunctionObjArgs(special, kind, item, version, NULL);
                if (!conv) { Py_CLEAR(converted); break; }
                PyList_SET_ITEM(converted, j, conv);
            }
            Py_DECREF(seq);
        }
        if (!converted) goto fail;
        int rc = PyDict_SetItem(out, name, converted);
        Py_DECREF(converted);
        if (rc < 0) goto fail;
    }
    Py_DECREF(plan);
    return out;
fail:
    Py_DECREF(plan);
    Py_DECREF(out);
    return NULL;
}

static PyObject *to_json(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "to_json(obj, version, plans, build, special)"); return NULL; }
    if (!PyDict_Check(args[2])) { PyErr_SetString(PyExc_TypeError, "plans must be a dict"); return NULL; }
    return json_struct(args[0], args[1], args[2], args[3], args[4], 0);
}


/* ------------------------------------------------------------------ record summaries */

/* The canonical part of a v2 records payload, summarised as kprotocol.records.summary does:
 * one dict per record with offset, timestamp, key, value and headers, bytes up to `max_bytes`
 * as hex and longer ones as length, prefix and sha256. Anything irregular (a bad length, a
 * non-minimal or long varint, invalid UTF-8, bytes left over) returns None without an exception,
 * and the Python reader reports it precisely. */

static PyObject *k_offset, *k_timestamp, *k_key, *k_value, *k_headers, *k_length, *k_hex, *k_prefix_hex,
    *k_sha256, *s_hexdigest;

/* A zigzag varint of at most 5 bytes (records use int32 lengths and deltas). */
static int read_zigzag(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) return -1;
        unsigned char b = buf[p++];
        result |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            if (b == 0 && shift) return -1;
            if (result > 0xffffffffu) return -1;
            uint32_t u = (uint32_t)result;
            *out = (int64_t)(int32_t)((u >> 1) ^ (uint32_t)-(int32_t)(u & 1));
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift > 28) return -1;
    }
}

static PyObject *hex_str(const unsigned char *p, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *out = PyUnicode_New(2 * n, 127);
    if (!out) return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        d[2 * i] = digits[p[i] >> 4];
        d[2 * i + 1] = digits[p[i] & 15];
    }
    return out;
}

/* None, {"length", "hex"} or {"length", "prefixHex", "sha256"}; NULL with an exception on failure. */
static PyObject *bytes_summary(const unsigned char *p, int64_t n, Py_ssize_t max_bytes, Py_ssize_t prefix,
                               PyObject *sha256) {
    if (n < 0) Py_RETURN_NONE;
    PyObject *out = PyDict_New(), *v = NULL;
    if (!out) return NULL;
    if (!(v = PyLong_FromLongLong(n)) || PyDict_SetItem(out, k_length, v) < 0) goto fail;
    Py_CLEAR(v);
    if (n <= max_bytes) {
        if (!(v = hex_str(p, (Py_ssize_t)n)) || PyDict_SetItem(out, k_hex, v) < 0) goto fail;
        Py_DECREF(v);
        return out;
    }
    if (!(v = hex_str(p, prefix)) || PyDict_SetItem(out, k_prefix_hex, v) < 0) goto fail;
    Py_CLEAR(v);
    PyObject *data = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
    if (!data) goto fail;
    PyObject *hash = PyObject_CallOneArg(sha256, data);
    Py_DECREF(data);
    if (!hash) goto fail;
    v = PyObject_CallMethodNoArgs(hash, s_hexdigest);
    Py_DECREF(hash);
    if (!v || PyDict_SetItem(out, k_sha256, v) < 0) goto fail;
    Py_DECREF(v);
    return out;
fail:
    Py_XDECREF(v);
    Py_DECREF(out);
    return NULL;
}

static int set_steal(PyObject *d, PyObject *k, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItem(d, k, v);
    Py_DECREF(v);
    return rc;
}

/* summarize_v2(payload, count, base_offset, base_ts, log_append_time, max_bytes, prefix, sha256) */
static PyObject *summarize_v2(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) { PyErr_SetString(PyExc_TypeError, "summarize_v2 takes 8 arguments"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]), base_ts = PyLong_AsLongLong(args[3]);
    int log_append = args[4] != Py_None;
    long long append_ts = log_append ? PyLong_AsLongLong(args[4]) : 0;
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[5]), prefix = PyLong_AsSsize_t(args[6]);
    PyObject *sha256 = args[7], *records = NULL;
    if (PyErr_Occurred()) goto fail;
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    if (count < 0 || count > n || prefix > max_bytes) goto irregular;
    if (!(records = PyList_New(count))) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, header_count;
        if (read_zigzag(buf, n, &pos, &length) < 0 || length < 0 || length > n - pos) goto irregular;
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++; /* attributes */
        if (read_zigzag(buf, end, &pos, &ts_delta) < 0 || read_zigzag(buf, end, &pos, &offset_delta) < 0 ||
            read_zigzag(buf, end, &pos, &key_len) < 0 || key_len < -1 || key_len > end - pos) goto irregular;
        const unsigned char *key = buf + pos;
        if (key_len > 0) pos += (Py_ssize_t)key_len;
        if (read_zigzag(buf, end, &pos, &value_len) < 0 || value_len < -1 || value_len > end - pos) goto irregular;
        const unsigned char *value = buf + pos;
        if (value_len > 0) pos += (Py_ssize_t)value_len;
        if (read_zigzag(buf, end, &pos, &header_count) < 0 || header_count < 0 || header_count * 2 > end - pos)
            goto irregular;
        PyObject *record = PyDict_New();
        if (!record) goto fail;
        PyList_SET_ITEM(records, i, record);
        long long timestamp = log_append ? append_ts : base_ts + ts_delta;
        if (set_steal(record, k_offset, PyLong_FromLongLong(base_offset + offset_delta)) < 0 ||
            set_steal(record, k_timestamp, PyLong_FromLongLong(timestamp)) < 0 ||
            set_steal(record, k_key, bytes_summary(key, key_len, max_bytes, prefix, sha256)) < 0 ||
            set_steal(record, k_value, bytes_summary(value, value_len, max_bytes, prefix, sha256)) < 0)
            goto fail;
        PyObject *headers = PyList_New(header_count);
        if (set_steal(record, k_headers, headers) < 0) goto fail;
        for (Py_ssize_t h = 0; h < header_count; h++) {
            int64_t name_len, data_len;
            if (read_zigzag(buf, end, &pos, &name_len) < 0 || name_len < 0 || name_len > end - pos) goto irregular;
            PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + pos, (Py_ssize_t)name_len, NULL);
            if (!name) { PyErr_Clear(); goto irregular; }
            pos += (Py_ssize_t)name_len;
            PyObject *header = PyDict_New();
            if (!header) { Py_DECREF(name); goto fail; }
            PyList_SET_ITEM(headers, h, header);
            if (set_steal(header, k_key, name) < 0) goto fail;
            if (read_zigzag(buf, end, &pos, &data_len) < 0 || data_len < -1 || data_len > end - pos) goto irregular;
            if (set_steal(header, k_value, bytes_summary(buf + pos, data_len, max_bytes, prefix, sha256)) < 0)
                goto fail;
            if (data_len > 0) pos += (Py_ssize_t)data_len;
        }
        if (pos != end) goto irregular;
    }
    if (pos != n) goto irregular;
    PyBuffer_Release(&view);
    return records;
irregular:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_O, "configure(make_uuid): set the uuid constructor."},
    {"to_json", (PyCFunction)(void (*)(void))to_json, METH_FASTCALL,
     "to_json(obj, version, plans, build, special): Kafka's JSON shape of a generated struct."},
    {"summarize_v2", (PyCFunction)(void (*)(void))summarize_v2, METH_FASTCALL,
     "summarize_v2(payload, count, base_offset, base_ts, log_append_time, max_bytes, prefix, sha256): "
     "record summaries of a canonical v2 records payload, or None."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kprotocol._speedups", "Compiled fast path for generated codecs.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&PlanType) < 0) return NULL;
    empty_tuple = PyTuple_New(0);
    if (!empty_tuple) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0) { Py_DECREF(m); return NULL; }
    if (!(k_offset = PyUnicode_InternFromString("offset")) || !(k_timestamp = PyUnicode_InternFromString("timestamp")) ||
        !(k_key = PyUnicode_InternFromString("key")) || !(k_value = PyUnicode_InternFromString("value")) ||
        !(k_headers = PyUnicode_InternFromString("headers")) || !(k_length = PyUnicode_InternFromString("length")) ||
        !(k_hex = PyUnicode_InternFromString("hex")) || !(k_prefix_hex = PyUnicode_InternFromString("prefixHex")) ||
        !(k_sha256 = PyUnicode_InternFromString("sha256")) ||
        !(s_hexdigest = PyUnicode_InternFromString("hexdigest"))) { Py_DECREF(m); return NULL; }
    return m;
}
