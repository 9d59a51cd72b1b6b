/* Compiled path from `__consumer_offsets` segment bytes to JSON lines (or the pipeline's Arrow columns).
 *
 * A Decoder walks canonical, uncompressed-or-decompressed magic-2 batches of a segment and writes
 * each record as `kprotocol offsets decode` prints it, driven by JSON plans that
 * kprotocol/coordinator_topics/lines.py builds from the generated classes' field schemas (one per struct
 * and version). It handles the common case only. A batch it does not take (another magic, a bad
 * CRC or length, a control batch, headers, a non-canonical varint...) stops the walk at that batch
 * for the Python reader, which decodes it or reports the problem precisely; a record it does not
 * take (an unknown type or version, a decode error, invalid UTF-8, an unusual tagged field...)
 * goes to a Python fallback that runs the reference decoder for that record. So the Python code
 * stays the reference and this file never reproduces its error messages, but for a few plain ones of
 * the Kafka Streams userdata inside classic group members' payloads (a missing or out-of-range
 * version, a repeated client tag: `streamsUserDataError`), which it decodes too (Decoder.payload
 * serves the capture decoder's JoinGroup/SyncGroup payloads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

enum { K_BOOL, K_INT8, K_INT16, K_INT32, K_INT64, K_UINT16, K_UINT32, K_UUID, K_STRING, K_BYTES, K_STRUCT };
static const int FIXED_SIZE[] = {1, 1, 2, 4, 8, 2, 4, 16};
/* How a tagged field's default is compared: a number, bytes (string/uuid/bytes), null, an empty array;
 * "other" (a struct) sends the record to the fallback whenever the tag is present. */
enum { D_INT, D_BYTES, D_NULL, D_EMPTY, D_OTHER };
enum { NCAP = 11 };
#define FB (-1)  /* not the common case: the Python fallback decides */
#define ERR (-2) /* a Python exception is set */

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int grow(Out *o, Py_ssize_t n) {
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    if (n > PY_SSIZE_T_MAX / 4 - o->len) { PyErr_NoMemory(); return ERR; }
    while (cap < o->len + n) cap *= 2;
    char *b = PyMem_RawRealloc(o->buf, cap);
    if (!b) { PyErr_NoMemory(); return ERR; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static inline int reserve(Out *o, Py_ssize_t n) { return o->len + n <= o->cap ? 0 : grow(o, n); }

static inline int put(Out *o, const void *p, Py_ssize_t n) {
    if (reserve(o, n) < 0) return ERR;
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

#define PUTS(o, s) put((o), (s), (Py_ssize_t)sizeof(s) - 1)

static inline int put_int(Out *o, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) tmp[n++] = '-';
    if (reserve(o, n) < 0) return ERR;
    for (int i = 0; i < n; i++) o->buf[o->len + i] = tmp[n - 1 - i];
    o->len += n;
    return 0;
}

static const char HEX[] = "0123456789abcdef";

/* A JSON string of strict UTF-8 `p[0..n)`, escaped as orjson escapes it; FB when not valid UTF-8. */
static int put_string(Out *o, const unsigned char *p, Py_ssize_t n) {
    if (reserve(o, n + 2) < 0) return ERR;
    o->buf[o->len++] = '"';
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t start = i;
        while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') i++;
        if (i > start && put(o, p + start, i - start) < 0) return ERR;
        if (i >= n) break;
        unsigned char c = p[i];
        if (c < 0x80) {
            char esc[6] = {'\\', 0, 0, 0, 0, 0};
            int k = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\t': esc[1] = 't'; break;
            case '\n': esc[1] = 'n'; break;
            case '\f': esc[1] = 'f'; break;
            case '\r': esc[1] = 'r'; break;
            default:
                esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = HEX[c >> 4]; esc[5] = HEX[c & 15];
                k = 6;
            }
            if (put(o, esc, k) < 0) return ERR;
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
        else return FB;
        if (i + len > n) return FB;
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return FB;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return FB;
        if (put(o, p + i, len) < 0) return ERR;
        i += len;
    }
    if (reserve(o, 1) < 0) return ERR;
    o->buf[o->len++] = '"';
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Base64 of p[0..n) in quotes: standard with padding, or URL-safe without (uuids). */
static int put_base64(Out *o, const unsigned char *p, Py_ssize_t n, int url) {
    const char *t = url ? B64URL : B64;
    if (reserve(o, (n + 2) / 3 * 4 + 2) < 0) return ERR;
    char *d = o->buf + o->len;
    *d++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *d++ = t[v >> 18]; *d++ = t[(v >> 12) & 63]; *d++ = t[(v >> 6) & 63]; *d++ = t[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *d++ = t[v >> 18]; *d++ = t[(v >> 12) & 63];
        if (!url) { *d++ = '='; *d++ = '='; }
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *d++ = t[v >> 18]; *d++ = t[(v >> 12) & 63]; *d++ = t[(v >> 6) & 63];
        if (!url) *d++ = '=';
    }
    *d++ = '"';
    o->len = d - o->buf;
    return 0;
}

/* ------------------------------------------------------------------ wire primitives */

static inline int64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

/* Minimal unsigned varint of at most 5 bytes (32 bits); FB on anything else. */
static int read_uvarint(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, uint32_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) return FB;
        unsigned char c = b[p++];
        result |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) {
            if (c == 0 && shift) return FB;
            if (result > 0xffffffffu) return FB;
            *out = (uint32_t)result;
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift > 28) return FB;
    }
}

/* Zig-zag varint of a record (minimal, at most `maxbytes` bytes); FB on anything else. */
static int read_zigzag(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int maxbytes, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < maxbytes; i++) {
        if (p >= end) return FB;
        unsigned char c = b[p++];
        result |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) {
            if ((c == 0 && i) || (i == 9 && c > 1)) return FB;
            if (maxbytes == 5 && result > 0xffffffffu) return FB;
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *pos = p;
            return 0;
        }
        shift += 7;
    }
    return FB;
}

/* Length of a string/bytes/array (width 2 or 4 when not flexible); *isnull for null. */
static int read_length(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int flex, int width,
                       Py_ssize_t *n, int *isnull) {
    *isnull = 0;
    if (flex) {
        uint32_t v;
        if (read_uvarint(b, end, pos, &v) < 0) return FB;
        if (v == 0) { *isnull = 1; return 0; }
        *n = (Py_ssize_t)v - 1;
        return 0;
    }
    if (*pos + width > end) return FB;
    int64_t v = width == 2 ? (int16_t)be(b + *pos, 2) : (int32_t)be(b + *pos, 4);
    *pos += width;
    if (v == -1) { *isnull = 1; return 0; }
    if (v < -1) return FB;
    *n = (Py_ssize_t)v;
    return 0;
}

/* ------------------------------------------------------------------ JSON plans */

typedef struct PlanObject PlanObject;

typedef struct {
    PyObject *key;      /* bytes: `"name":` */
    int kind, array, nullable, tag, capture, hook;
    int early;          /* tagged, but before a regular field in the spec: taken at its default only */
    int dkind;          /* D_* (tagged fields) */
    int64_t dint;
    PyObject *dbytes;   /* D_BYTES default */
    PlanObject *sub;
    PyObject *hook_key; /* bytes: `,"decodedName":` */
} FieldPlan;

struct PlanObject {
    PyObject_HEAD
    int flexible, nfields, has_hooks;
    FieldPlan *fields;
    PyObject *refs; /* the field tuple: keeps keys, defaults and subs alive */
};

static PyTypeObject PlanType;

static void Plan_dealloc(PlanObject *self) {
    PyObject_GC_UnTrack(self);
    PyMem_Free(self->fields);
    Py_CLEAR(self->refs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Plan_traverse(PlanObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->refs);
    return 0;
}

/* Plan(flexible, fields): each field (key, kind, array, nullable, tag, dkind, default, sub, capture, hook,
 * hook_key[, early]), in spec order, tagged fields last. */
static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    int flexible;
    PyObject *fields;
    if (!PyArg_ParseTuple(args, "pO!", &flexible, &PyTuple_Type, &fields)) return NULL;
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->flexible = flexible;
    self->refs = Py_NewRef(fields);
    self->nfields = (int)PyTuple_GET_SIZE(fields);
    self->fields = PyMem_Calloc(self->nfields ? self->nfields : 1, sizeof(FieldPlan));
    if (!self->fields) { Py_DECREF(self); return PyErr_NoMemory(); }
    for (int i = 0; i < self->nfields; i++) {
        FieldPlan *f = &self->fields[i];
        PyObject *sub, *dflt;
        long long dint = 0;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, i), "SiiiiiOOiiO|p", &f->key, &f->kind, &f->array, &f->nullable,
                              &f->tag, &f->dkind, &dflt, &sub, &f->capture, &f->hook, &f->hook_key, &f->early)) {
            Py_DECREF(self);
            return NULL;
        }
        if (f->kind < K_BOOL || f->kind > K_STRUCT || f->capture >= NCAP || f->dkind < D_INT || f->dkind > D_OTHER) {
            PyErr_SetString(PyExc_ValueError, "bad field plan");
            Py_DECREF(self);
            return NULL;
        }
        if (f->dkind == D_INT) {
            dint = PyLong_AsLongLong(dflt);
            if (dint == -1 && PyErr_Occurred()) { Py_DECREF(self); return NULL; }
        } else if (f->dkind == D_BYTES) {
            if (!PyBytes_Check(dflt)) { PyErr_SetString(PyExc_TypeError, "bytes default expected"); Py_DECREF(self); return NULL; }
            f->dbytes = dflt;
        }
        f->dint = dint;
        if (f->kind == K_STRUCT) {
            if (!PyObject_TypeCheck(sub, &PlanType)) { PyErr_SetString(PyExc_TypeError, "struct field needs a Plan"); Py_DECREF(self); return NULL; }
            f->sub = (PlanObject *)sub;
        }
        if (f->hook) {
            if (!PyBytes_Check(f->hook_key)) { PyErr_SetString(PyExc_TypeError, "hook key must be bytes"); Py_DECREF(self); return NULL; }
            self->has_hooks = 1;
        }
    }
    return (PyObject *)self;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol.coordinator_topics._offsets.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Plan_new,
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_traverse = (traverseproc)Plan_traverse,
};

/* A top-level scalar remembered while a record is written (group, offsets, protocol...). */
typedef struct {
    int set, isnull, kind;
    int64_t i;
    const unsigned char *p;
    Py_ssize_t n;
} Capture;

enum { NESTED_VERSIONS = 8 };

typedef struct {
    Capture cap[NCAP];
    PyObject *hook; /* hook(which, protocol, payload) -> JSON bytes or None */
    PlanObject *nested[2][NESTED_VERSIONS]; /* [hook - 1][version]: consumer-protocol plans */
    int latest[2];                          /* their latest version, -1 for none */
} Ctx;

enum { CAP_PROTOCOL_TYPE = 8, CAP_PROTOCOL = 9, CAP_USER_DATA = 10 };

/* A scalar read off the wire: its number, or its bytes. */
typedef struct {
    int isnull;
    int64_t i;
    const unsigned char *p;
    Py_ssize_t n;
} Scalar;

static int read_scalar(int kind, const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int flex, int nullable,
                       Scalar *v) {
    v->isnull = 0;
    if (kind <= K_UUID) {
        int size = FIXED_SIZE[kind];
        if (*pos + size > end) return FB;
        const unsigned char *p = b + *pos;
        switch (kind) {
        case K_BOOL: if (p[0] > 1) return FB; v->i = p[0]; break;
        case K_INT8: v->i = (int8_t)p[0]; break;
        case K_INT16: v->i = (int16_t)be(p, 2); break;
        case K_INT32: v->i = (int32_t)be(p, 4); break;
        case K_INT64: v->i = be(p, 8); break;
        case K_UINT16: v->i = (uint16_t)be(p, 2); break;
        case K_UINT32: v->i = (uint32_t)be(p, 4); break;
        case K_UUID: v->p = p; v->n = 16; break;
        }
        *pos += size;
        return 0;
    }
    Py_ssize_t n = 0;
    int isnull;
    if (read_length(b, end, pos, flex, kind == K_STRING ? 2 : 4, &n, &isnull) < 0) return FB;
    if (isnull) {
        if (!nullable) return FB;
        v->isnull = 1;
        return 0;
    }
    if ((kind == K_STRING && n > 0x7fff) || n > end - *pos) return FB;
    v->p = b + *pos;
    v->n = n;
    *pos += n;
    return 0;
}

static int put_scalar(Out *o, int kind, const Scalar *v) {
    if (v->isnull) return PUTS(o, "null");
    switch (kind) {
    case K_BOOL: return v->i ? PUTS(o, "true") : PUTS(o, "false");
    case K_UUID: return put_base64(o, v->p, 16, 1);
    case K_STRING: return put_string(o, v->p, v->n);
    case K_BYTES: return put_base64(o, v->p, v->n, 0);
    default: return put_int(o, v->i);
    }
}

static int emit_struct(PlanObject *pl, const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, Out *o, Ctx *ctx,
                       int top);

/* One field's value (not its key) off the wire, as JSON. */
static int emit_value(const FieldPlan *f, int flex, const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, Out *o,
                      Ctx *ctx, Scalar *last) {
    int r;
    if (f->array) {
        Py_ssize_t n = 0;
        int isnull;
        if (read_length(b, end, pos, flex, 4, &n, &isnull) < 0) return FB;
        if (isnull) {
            if (!f->nullable) return FB;
            return PUTS(o, "null");
        }
        if (n > end - *pos) return FB;
        if (PUTS(o, "[") < 0) return ERR;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && PUTS(o, ",") < 0) return ERR;
            if (f->kind == K_STRUCT) {
                if ((r = emit_struct(f->sub, b, end, pos, o, ctx, 0)) < 0) return r;
            } else {
                Scalar v;
                if (read_scalar(f->kind, b, end, pos, flex, 0, &v) < 0) return FB;
                if ((r = put_scalar(o, f->kind, &v)) < 0) return r;
            }
        }
        return PUTS(o, "]");
    }
    if (f->kind == K_STRUCT) {
        if (f->nullable) {
            if (*pos >= end) return FB;
            unsigned char m = b[(*pos)++];
            if (m == 255) return PUTS(o, "null");
            if (m != 1) return FB;
        }
        return emit_struct(f->sub, b, end, pos, o, ctx, 0);
    }
    if (read_scalar(f->kind, b, end, pos, flex, f->nullable, last) < 0) return FB;
    return put_scalar(o, f->kind, last);
}

static void capture(Ctx *ctx, const FieldPlan *f, const Scalar *v) {
    Capture *c = &ctx->cap[f->capture];
    c->set = 1;
    c->isnull = v->isnull;
    c->kind = f->kind;
    c->i = v->i;
    c->p = v->p;
    c->n = v->n;
}

static int is_default(const FieldPlan *f, const Scalar *v) {
    switch (f->dkind) {
    case D_INT: return !v->isnull && v->i == f->dint;
    case D_NULL: return v->isnull;
    case D_BYTES:
        return !v->isnull && v->n == PyBytes_GET_SIZE(f->dbytes) && memcmp(v->p, PyBytes_AS_STRING(f->dbytes), v->n) == 0;
    default: return 0;
    }
}

/* A tagged field present on the wire at [*pos, e): written after a comma unless it equals its default. */
static int emit_tagged(const FieldPlan *f, const unsigned char *b, Py_ssize_t e, Py_ssize_t *pos, Out *o, Ctx *ctx,
                       int *first) {
    int r;
    if (f->array) {
        if (f->dkind != D_EMPTY && f->dkind != D_NULL) return FB;
        Py_ssize_t p = *pos, n = 0;
        int isnull;
        if (read_length(b, e, &p, 1, 4, &n, &isnull) < 0) return FB;
        if ((isnull && f->dkind == D_NULL) || (!isnull && n == 0 && f->dkind == D_EMPTY)) {
            *pos = p;
            return 0;
        }
    } else if (f->kind == K_STRUCT) {
        /* only a null struct (marker 0 in a tag): a present one may hold payloads decoded in Python */
        if (!f->nullable || *pos >= e || b[*pos] != 0) return FB;
        (*pos)++;
        if (f->dkind == D_NULL) return 0;
        if (!*first && PUTS(o, ",") < 0) return ERR;
        *first = 0;
        if (put(o, PyBytes_AS_STRING(f->key), PyBytes_GET_SIZE(f->key)) < 0) return ERR;
        return PUTS(o, "null");
    } else if (f->dkind == D_OTHER || f->dkind == D_EMPTY) {
        return FB;
    } else {
        Scalar v;
        Py_ssize_t p = *pos;
        if (read_scalar(f->kind, b, e, &p, 1, f->nullable, &v) < 0) return FB;
        if (f->capture >= 0) capture(ctx, f, &v);
        *pos = p;
        if (is_default(f, &v)) return 0;
        if (!*first && PUTS(o, ",") < 0) return ERR;
        *first = 0;
        if (put(o, PyBytes_AS_STRING(f->key), PyBytes_GET_SIZE(f->key)) < 0) return ERR;
        return put_scalar(o, f->kind, &v);
    }
    if (!*first && PUTS(o, ",") < 0) return ERR;
    *first = 0;
    if (put(o, PyBytes_AS_STRING(f->key), PyBytes_GET_SIZE(f->key)) < 0) return ERR;
    Scalar unused;
    if ((r = emit_value(f, 1, b, e, pos, o, ctx, &unused)) < 0) return r;
    return 0;
}

/* ------------------------------------------------------------------ Kafka Streams userdata */

/* SubscriptionInfo and AssignmentInfo v1-11 (the userData of a "stream" member's consumer-protocol
 * payload) rendered as kprotocol.streams' to_fields() and NestedMessage.to_json() render them:
 * `,"streamsUserData":{...}` or `,"streamsUserDataError":"..."`. The common errors (no userData, a short
 * version, a version out of range, a repeated client tag) are written here; anything else unusual (a
 * truncated or oversized collection, text that is not plain UTF-8, a lone surrogate...) is FB, and the
 * Python decoder (the reference) takes the whole payload. */

typedef struct {
    const unsigned char *b;
    Py_ssize_t n, pos;
} Rd;

static inline int rd_int(Rd *r, int size, int64_t *v) {
    if (r->n - r->pos < size) return FB;
    const unsigned char *p = r->b + r->pos;
    *v = size == 1 ? (int8_t)p[0] : size == 2 ? (int16_t)be(p, 2) : size == 4 ? (int32_t)be(p, 4) : be(p, 8);
    r->pos += size;
    return 0;
}

/* An int32 count of elements of at least `min_size` bytes each that fit in what remains. */
static inline int rd_count(Rd *r, int min_size, int64_t *count) {
    if (rd_int(r, 4, count) < 0 || *count < 0 || *count * min_size > r->n - r->pos) return FB;
    return 0;
}

static inline int rd_take(Rd *r, int64_t len, const unsigned char **p) {
    if (len < 0 || len > r->n - r->pos) return FB;
    *p = r->b + r->pos;
    r->pos += len;
    return 0;
}

/* Strict UTF-8 without surrogates; `max_len` 3 also refuses 4-byte sequences (Java's readUTF does). */
static int plain_utf8(const unsigned char *p, Py_ssize_t n, int max_len) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) { i++; continue; }
        int len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (len > max_len || i + len > n) return 0;
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += len;
    }
    return 1;
}

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    int isnull;
} Text;

/* bytes32 of UTF-8 (SubscriptionInfo's endpoint and client tags). */
static int rd_utf8_32(Rd *r, Text *t) {
    int64_t len;
    t->isnull = 0;
    if (rd_int(r, 4, &len) < 0 || rd_take(r, len, &t->p) < 0) return FB;
    t->n = (Py_ssize_t)len;
    return plain_utf8(t->p, t->n, 4) ? 0 : FB;
}

/* Growable arrays of the records below (an Out holding whole elements). */
#define VEC_AT(o, T, i) (((T *)(o)->buf)[i])
#define VEC_LEN(o, T) ((o)->len / (Py_ssize_t)sizeof(T))

static void *vec_push(Out *o, Py_ssize_t size) {
    if (reserve(o, size) < 0) return NULL;
    void *at = o->buf + o->len;
    o->len += size;
    memset(at, 0, size);
    return at;
}

/* A task (its rendered id in `txt` at `at`), with its offset sum or its standby partitions [lo, hi). */
typedef struct {
    const unsigned char *p;
    Py_ssize_t at, n, idx, lo, hi;
    int64_t value;
    int standby; /* v1-6 subscriptions: from the standby list */
} TaskEnt;

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    int isnull;
    int32_t partition;
} TpEnt;

typedef struct {
    Text host;
    int32_t port;
    Py_ssize_t idx, lo, hi;
} HostEnt;

typedef struct {
    int32_t index;
    Text topic;
    Py_ssize_t idx;
} DictEnt;

typedef struct {
    Text key, value;
    Py_ssize_t idx;
} TagEnt;

typedef struct {
    Out txt, tasks, tps, hosts, dict, tags, msg;
    Out conv; /* modified UTF-8 converted to UTF-8: allocated once, as long as the payload (never moves) */
} Scratch;

static void scratch_free(Scratch *s) {
    PyMem_RawFree(s->txt.buf);
    PyMem_RawFree(s->tasks.buf);
    PyMem_RawFree(s->tps.buf);
    PyMem_RawFree(s->hosts.buf);
    PyMem_RawFree(s->dict.buf);
    PyMem_RawFree(s->tags.buf);
    PyMem_RawFree(s->msg.buf);
    PyMem_RawFree(s->conv.buf);
}

/* writeUTF's modified UTF-8 (AssignmentInfo's topics and hosts) as decode_mutf8 reads it: 1-3 byte
 * sequences (overlong ones too, so NUL is c0 80), surrogate pairs joined; a lone surrogate is FB. Text
 * that is not plain UTF-8 already is converted into s->conv (never longer than its bytes). */
static int rd_mutf8(Rd *r, Scratch *s, Text *t) {
    if (r->n - r->pos < 2) return FB;
    int64_t len = (uint16_t)be(r->b + r->pos, 2);
    r->pos += 2;
    t->isnull = 0;
    if (rd_take(r, len, &t->p) < 0) return FB;
    t->n = (Py_ssize_t)len;
    if (plain_utf8(t->p, t->n, 3)) return 0;
    const unsigned char *p = t->p;
    Py_ssize_t i = 0, n = t->n;
    uint32_t high = 0;
    int pending = 0; /* a high surrogate waiting for its low half */
    unsigned char *d = (unsigned char *)s->conv.buf + s->conv.len, *start = d;
    if (!s->conv.buf || s->conv.len + n > s->conv.cap) return FB;
    while (i < n) {
        uint32_t c = p[i], u;
        if (c < 0x80) { u = c; i++; }
        else if ((c >> 4) == 12 || (c >> 4) == 13) {
            if (i + 2 > n || (p[i + 1] & 0xc0) != 0x80) return FB;
            u = (c & 0x1f) << 6 | (p[i + 1] & 0x3f);
            i += 2;
        } else if ((c >> 4) == 14) {
            if (i + 3 > n || (p[i + 1] & 0xc0) != 0x80 || (p[i + 2] & 0xc0) != 0x80) return FB;
            u = (c & 0x0f) << 12 | (p[i + 1] & 0x3f) << 6 | (p[i + 2] & 0x3f);
            i += 3;
        } else return FB;
        if (pending) {
            if (u < 0xdc00 || u > 0xdfff) return FB;
            uint32_t cp = 0x10000 + ((high - 0xd800) << 10) + (u - 0xdc00);
            *d++ = (unsigned char)(0xf0 | cp >> 18); *d++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
            *d++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)); *d++ = (unsigned char)(0x80 | (cp & 0x3f));
            pending = 0;
            continue;
        }
        if (u >= 0xd800 && u <= 0xdbff) { high = u; pending = 1; continue; }
        if (u >= 0xdc00 && u <= 0xdfff) return FB;
        if (u < 0x80) *d++ = (unsigned char)u;
        else if (u < 0x800) { *d++ = (unsigned char)(0xc0 | u >> 6); *d++ = (unsigned char)(0x80 | (u & 0x3f)); }
        else {
            *d++ = (unsigned char)(0xe0 | u >> 12); *d++ = (unsigned char)(0x80 | ((u >> 6) & 0x3f));
            *d++ = (unsigned char)(0x80 | (u & 0x3f));
        }
    }
    if (pending) return FB;
    t->p = start;
    t->n = d - start;
    s->conv.len += t->n;
    return 0;
}

static int cmp_text(const unsigned char *a, Py_ssize_t an, const unsigned char *b, Py_ssize_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int cmp_task(const void *x, const void *y) {
    const TaskEnt *a = x, *b = y;
    int c = cmp_text(a->p, a->n, b->p, b->n);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

/* Python's (topic is None, topic or "", partition). */
static int cmp_tp(const void *x, const void *y) {
    const TpEnt *a = x, *b = y;
    if (a->isnull != b->isnull) return a->isnull - b->isnull;
    int c = cmp_text(a->p, a->n, b->p, b->n);
    return c ? c : (a->partition > b->partition) - (a->partition < b->partition);
}

static int cmp_host(const void *x, const void *y) {
    const HostEnt *a = x, *b = y;
    int c = cmp_text(a->host.p, a->host.n, b->host.p, b->host.n);
    if (!c) c = (a->port > b->port) - (a->port < b->port);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_dict(const void *x, const void *y) {
    const DictEnt *a = x, *b = y;
    int c = (a->index > b->index) - (a->index < b->index);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_tag(const void *x, const void *y) {
    const TagEnt *a = x, *b = y;
    int c = cmp_text(a->key.p, a->key.n, b->key.p, b->key.n);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int same_text(const unsigned char *a, Py_ssize_t an, const unsigned char *b, Py_ssize_t bn) {
    return an == bn && memcmp(a, b, an) == 0;
}

/* A task id as TaskId.__str__ writes it, appended to s->txt: `name__sub_part` or `sub_part`. */
static TaskEnt *push_task(Scratch *s, const unsigned char *name, Py_ssize_t name_len, int64_t sub, int64_t part) {
    TaskEnt *t = vec_push(&s->tasks, sizeof(TaskEnt));
    if (!t) return NULL;
    t->idx = VEC_LEN(&s->tasks, TaskEnt) - 1;
    t->at = s->txt.len;
    if ((name_len > 0 && (put(&s->txt, name, name_len) < 0 || PUTS(&s->txt, "__") < 0)) || put_int(&s->txt, sub) < 0 ||
        PUTS(&s->txt, "_") < 0 || put_int(&s->txt, part) < 0)
        return NULL;
    t->n = s->txt.len - t->at;
    return t;
}

/* Point the tasks at their rendered ids (once `txt` stops growing) and sort them by id, then wire order. */
static void sort_tasks(Scratch *s) {
    Py_ssize_t n = VEC_LEN(&s->tasks, TaskEnt);
    for (Py_ssize_t i = 0; i < n; i++) VEC_AT(&s->tasks, TaskEnt, i).p = (const unsigned char *)s->txt.buf + VEC_AT(&s->tasks, TaskEnt, i).at;
    if (n > 1) qsort(s->tasks.buf, n, sizeof(TaskEnt), cmp_task);
}

static int put_text(Out *o, const Text *t) {
    return t->isnull ? PUTS(o, "null") : put_string(o, t->p, t->n);
}

static int put_uuid_text(Out *o, const unsigned char *p) {
    char u[38];
    int k = 0;
    u[k++] = '"';
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) u[k++] = '-';
        u[k++] = HEX[p[i] >> 4];
        u[k++] = HEX[p[i] & 15];
    }
    u[k++] = '"';
    return put(o, u, k);
}

/* A topic-partition set: sorted, without repeats (render_tps). */
static int put_tps(Out *o, Scratch *s, Py_ssize_t lo, Py_ssize_t hi) {
    TpEnt *tp = &VEC_AT(&s->tps, TpEnt, 0);
    if (hi - lo > 1) qsort(tp + lo, hi - lo, sizeof(TpEnt), cmp_tp);
    if (PUTS(o, "[") < 0) return ERR;
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (i > lo && cmp_tp(&tp[i - 1], &tp[i]) == 0) continue;
        Text topic = {tp[i].p, tp[i].n, tp[i].isnull};
        if ((i > lo && PUTS(o, ",") < 0) || PUTS(o, "{\"topic\":") < 0 || put_text(o, &topic) < 0 ||
            PUTS(o, ",\"partition\":") < 0 || put_int(o, tp[i].partition) < 0 || PUTS(o, "}") < 0)
            return ERR;
    }
    return PUTS(o, "]");
}

/* A host map (the later entry of a host wins) sorted by (host, port): render_host_map. */
static int put_host_map(Out *o, Scratch *s, Py_ssize_t lo, Py_ssize_t hi) {
    HostEnt *h = &VEC_AT(&s->hosts, HostEnt, 0);
    if (hi - lo > 1) qsort(h + lo, hi - lo, sizeof(HostEnt), cmp_host);
    if (PUTS(o, "[") < 0) return ERR;
    int first = 1;
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (i + 1 < hi && h[i + 1].port == h[i].port && same_text(h[i + 1].host.p, h[i + 1].host.n, h[i].host.p, h[i].host.n))
            continue; /* a later entry of the same host */
        if ((!first && PUTS(o, ",") < 0) || PUTS(o, "[{\"host\":") < 0 || put_text(o, &h[i].host) < 0 ||
            PUTS(o, ",\"port\":") < 0 || put_int(o, h[i].port) < 0 || PUTS(o, "},") < 0 ||
            put_tps(o, s, h[i].lo, h[i].hi) < 0 || PUTS(o, "]") < 0)
            return ERR;
        first = 0;
    }
    return PUTS(o, "]");
}

/* `,"streamsUserDataError":"<class>: <error class>: <message>"`. */
static int put_userdata_error(Out *o, const char *text, Py_ssize_t n) {
    if (PUTS(o, ",\"streamsUserDataError\":") < 0) return ERR;
    return put_string(o, (const unsigned char *)text, n);
}

static int put_userdata_errorf(Out *o, const char *fmt, ...) {
    char text[320];
    va_list args;
    va_start(args, fmt);
    int n = PyOS_vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    if (n < 0 || n >= (int)sizeof(text)) return FB;
    return put_userdata_error(o, text, n);
}

/* Kafka's check of (version, latestSupportedVersion) as version_problem words it, or 0 when acceptable. */
static int subscription_version_problem(int64_t version, int64_t latest, char *text, size_t size) {
    if (latest == -1) {
        if (version == 1 || version == 2) return 0;
        return PyOS_snprintf(text, size, "Only versions 1 and 2 are expected to use an UNKNOWN (-1) latest supported "
                             "version. Got %lld.", (long long)version);
    }
    if (1 <= version && version <= latest) return 0;
    return PyOS_snprintf(text, size, "version must be between 1 and %lld; was: %lld", (long long)latest, (long long)version);
}

static int put_subscription_fields(Out *o, Scratch *s, int64_t version, int64_t latest, const unsigned char *process,
                                   const Text *endpoint, int64_t unique, int64_t error_code) {
    sort_tasks(s);
    Py_ssize_t n = VEC_LEN(&s->tasks, TaskEnt);
    TaskEnt *t = &VEC_AT(&s->tasks, TaskEnt, 0);
    static const unsigned char zero[16];
    if (PUTS(o, "{\"version\":") < 0 || put_int(o, version) < 0 || PUTS(o, ",\"latestSupportedVersion\":") < 0 ||
        put_int(o, latest) < 0 || PUTS(o, ",\"processId\":") < 0 || put_uuid_text(o, process ? process : zero) < 0)
        return ERR;
    /* prevTasks then standbyTasks: v1-6 by the list a task came from, v7+ by its (last) offset sum. */
    for (int standby = 0; standby < 2; standby++) {
        if ((standby ? PUTS(o, "],\"standbyTasks\":[") : PUTS(o, ",\"prevTasks\":[")) < 0) return ERR;
        int first = 1;
        const TaskEnt *last = NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            int is_last = i + 1 == n || !same_text(t[i].p, t[i].n, t[i + 1].p, t[i + 1].n);
            int take = version <= 6 ? t[i].standby == standby : is_last && (t[i].value != -2) == standby;
            if (!take || (last && same_text(last->p, last->n, t[i].p, t[i].n))) continue;
            if ((!first && PUTS(o, ",") < 0) || put_string(o, t[i].p, t[i].n) < 0) return ERR;
            first = 0;
            last = &t[i];
        }
    }
    if (PUTS(o, "],\"taskOffsetSums\":[") < 0) return ERR;
    int first = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 1 < n && same_text(t[i].p, t[i].n, t[i + 1].p, t[i + 1].n)) continue; /* the later sum wins */
        if ((!first && PUTS(o, ",") < 0) || PUTS(o, "[") < 0 || put_string(o, t[i].p, t[i].n) < 0 || PUTS(o, ",") < 0 ||
            put_int(o, t[i].value) < 0 || PUTS(o, "]") < 0)
            return ERR;
        first = 0;
    }
    if (PUTS(o, "],\"userEndPoint\":") < 0 || put_text(o, endpoint) < 0 || PUTS(o, ",\"uniqueField\":") < 0 ||
        put_int(o, unique) < 0 || PUTS(o, ",\"errorCode\":") < 0 || put_int(o, error_code) < 0 ||
        PUTS(o, ",\"clientTags\":[") < 0)
        return ERR;
    Py_ssize_t ntags = VEC_LEN(&s->tags, TagEnt);
    TagEnt *tg = &VEC_AT(&s->tags, TagEnt, 0);
    for (Py_ssize_t i = 0; i < ntags; i++) {
        if ((i && PUTS(o, ",") < 0) || PUTS(o, "[") < 0 || put_text(o, &tg[i].key) < 0 || PUTS(o, ",") < 0 ||
            put_text(o, &tg[i].value) < 0 || PUTS(o, "]") < 0)
            return ERR;
    }
    return PUTS(o, "]}");
}

/* The first repeated client tag key in wire order (Kafka's clientTags() getter fails on it): its error. */
static int client_tag_problem(Out *o, Scratch *s) {
    Py_ssize_t n = VEC_LEN(&s->tags, TagEnt), dup = -1;
    TagEnt *tg = &VEC_AT(&s->tags, TagEnt, 0);
    if (n > 1) qsort(tg, n, sizeof(TagEnt), cmp_tag);
    Py_ssize_t first_of = 0, seen = -1;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (!same_text(tg[i].key.p, tg[i].key.n, tg[first_of].key.p, tg[first_of].key.n)) { first_of = i; continue; }
        if (i == first_of + 1 && (dup < 0 || tg[i].idx < tg[dup].idx)) { dup = i; seen = first_of; }
    }
    if (dup < 0) return 0;
    Out *m = &s->msg;
    m->len = 0;
    if (PUTS(m, "SubscriptionInfo: DuplicateClientTagError: Duplicate key ") < 0 || put(m, tg[dup].key.p, tg[dup].key.n) < 0 ||
        PUTS(m, " (attempted merging values ") < 0 || put(m, tg[seen].value.p, tg[seen].value.n) < 0 ||
        PUTS(m, " and ") < 0 || put(m, tg[dup].value.p, tg[dup].value.n) < 0 || PUTS(m, ") (at client_tags[") < 0 ||
        put_int(m, tg[dup].idx) < 0 || PUTS(m, "].key)") < 0)
        return ERR;
    int r = put_userdata_error(o, m->buf, m->len);
    return r < 0 ? r : 1;
}

static int subscription_info(Out *o, Scratch *s, const unsigned char *b, Py_ssize_t n) {
    char problem[200];
    if (n < 4)
        return put_userdata_errorf(o, "SubscriptionInfo: TruncatedError: need a 4-byte version, got %zd byte(s) (at version, offset 0)", n);
    int64_t version = (int32_t)be(b, 4), latest = -1, unique = 0, error_code = 0, count, sub, part, value;
    if (version > 11) { /* a newer member's: only the probing header is read */
        if (n < 8)
            return put_userdata_errorf(o, "SubscriptionInfo: TruncatedError: need the 8-byte version probing header "
                                          "(at latest_supported_version, offset 4)");
        latest = (int32_t)be(b + 4, 4);
        if (subscription_version_problem(version, latest, problem, sizeof(problem)))
            return put_userdata_errorf(o, "SubscriptionInfo: UnsupportedVersionError: %s (at latest_supported_version, offset 4)", problem);
        if (PUTS(o, ",\"streamsUserData\":") < 0) return ERR;
        Text none = {NULL, 0, 1};
        return put_subscription_fields(o, s, version, latest, NULL, &none, 0, 0);
    }
    int layout = version >= 1 ? (int)version : 1;
    Rd r = {b, n, 4};
    const unsigned char *process;
    Text endpoint = {NULL, 0, 1};
    if (layout >= 3 && rd_int(&r, 4, &latest) < 0) return FB;
    if (rd_take(&r, 16, &process) < 0) return FB;
    if (layout <= 6) {
        for (int standby = 0; standby < 2; standby++) {
            if (rd_count(&r, 8, &count) < 0) return FB;
            for (int64_t i = 0; i < count; i++) {
                if (rd_int(&r, 4, &sub) < 0 || rd_int(&r, 4, &part) < 0) return FB;
                TaskEnt *t = push_task(s, NULL, 0, sub, part);
                if (!t) return ERR;
                t->value = standby ? -3 : -2;
                t->standby = standby;
            }
        }
        if (layout >= 2 && rd_utf8_32(&r, &endpoint) < 0) return FB;
    } else {
        if (rd_utf8_32(&r, &endpoint) < 0 || rd_count(&r, layout <= 9 ? 8 : 18, &count) < 0) return FB;
        if (layout <= 9) { /* groups of (subtopology, [(partition, offset sum)]) */
            for (int64_t g = 0; g < count; g++) {
                int64_t inner;
                if (rd_int(&r, 4, &sub) < 0 || rd_count(&r, 12, &inner) < 0) return FB;
                for (int64_t i = 0; i < inner; i++) {
                    if (rd_int(&r, 4, &part) < 0 || rd_int(&r, 8, &value) < 0) return FB;
                    TaskEnt *t = push_task(s, NULL, 0, sub, part);
                    if (!t) return ERR;
                    t->value = value;
                }
            }
        } else {
            for (int64_t i = 0; i < count; i++) {
                int64_t len;
                const unsigned char *name = NULL;
                if (rd_int(&r, 4, &sub) < 0 || rd_int(&r, 4, &part) < 0 || rd_int(&r, 8, &value) < 0 ||
                    rd_int(&r, 2, &len) < 0)
                    return FB;
                if (len < 0) len = 0;
                else if (rd_take(&r, len, &name) < 0 || !plain_utf8(name, len, 4)) return FB;
                TaskEnt *t = push_task(s, name, len, sub, part);
                if (!t) return ERR;
                t->value = value;
            }
        }
        if (layout >= 8 && rd_int(&r, 1, &unique) < 0) return FB;
        if (layout >= 9 && rd_int(&r, 4, &error_code) < 0) return FB;
        if (layout >= 11) {
            if (rd_count(&r, 8, &count) < 0) return FB;
            for (int64_t i = 0; i < count; i++) {
                TagEnt *tg = vec_push(&s->tags, sizeof(TagEnt));
                if (!tg) return ERR;
                tg->idx = i;
                if (rd_utf8_32(&r, &tg->key) < 0 || rd_utf8_32(&r, &tg->value) < 0) return FB;
            }
        }
    }
    if (endpoint.n == 0) endpoint.isnull = 1; /* empty reads as none */
    if (subscription_version_problem(version, latest, problem, sizeof(problem)))
        return put_userdata_errorf(o, "SubscriptionInfo: UnsupportedVersionError: %s (at version, offset 0)", problem);
    int r2 = client_tag_problem(o, s);
    if (r2) return r2 < 0 ? r2 : 0;
    if (PUTS(o, ",\"streamsUserData\":") < 0) return ERR;
    return put_subscription_fields(o, s, version, latest, process, &endpoint, unique, error_code);
}

/* A task of an AssignmentInfo: two int32s, and from v10 a UTF-16 topology name (a char count, <= 0: none). */
static TaskEnt *rd_assigned_task(Rd *r, Scratch *s, int named) {
    int64_t sub, part, chars = 0;
    if (rd_int(r, 4, &sub) < 0 || rd_int(r, 4, &part) < 0 || (named && rd_int(r, 4, &chars) < 0)) return NULL;
    Out *m = &s->msg;
    m->len = 0;
    if (chars > 0) {
        const unsigned char *u;
        if (rd_take(r, 2 * chars, &u) < 0) return NULL;
        for (int64_t i = 0; i < chars; i++) {
            uint32_t c = (uint32_t)u[2 * i] << 8 | u[2 * i + 1];
            char enc[3];
            int k;
            if (c >= 0xd800 && c <= 0xdfff) return NULL; /* surrogates: the Python path */
            if (c < 0x80) { enc[0] = (char)c; k = 1; }
            else if (c < 0x800) { enc[0] = (char)(0xc0 | c >> 6); enc[1] = (char)(0x80 | (c & 0x3f)); k = 2; }
            else { enc[0] = (char)(0xe0 | c >> 12); enc[1] = (char)(0x80 | ((c >> 6) & 0x3f)); enc[2] = (char)(0x80 | (c & 0x3f)); k = 3; }
            if (put(m, enc, k) < 0) return NULL;
        }
    }
    return push_task(s, (const unsigned char *)m->buf, m->len, sub, part);
}

/* Topic-partitions written inline (standby tasks, v2-4 host maps) into s->tps; their range. */
static int rd_tps(Rd *r, Scratch *s, Py_ssize_t *lo, Py_ssize_t *hi) {
    int64_t count, part;
    if (rd_count(r, 6, &count) < 0) return FB;
    *lo = VEC_LEN(&s->tps, TpEnt);
    for (int64_t i = 0; i < count; i++) {
        Text topic;
        if (rd_mutf8(r, s, &topic) < 0 || rd_int(r, 4, &part) < 0) return FB;
        TpEnt *tp = vec_push(&s->tps, sizeof(TpEnt));
        if (!tp) return ERR;
        tp->p = topic.p;
        tp->n = topic.n;
        tp->partition = (int32_t)part;
    }
    *hi = VEC_LEN(&s->tps, TpEnt);
    return 0;
}

/* The topic of a v5+ dictionary index (the later entry of an index wins), or none. */
static const DictEnt *lookup(const DictEnt *d, Py_ssize_t n, int64_t index) {
    Py_ssize_t lo = 0, hi = n; /* the first entry past `index` */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (d[mid].index <= index) lo = mid + 1; else hi = mid;
    }
    return lo > 0 && d[lo - 1].index == index ? &d[lo - 1] : NULL;
}

/* A host map: inline topic-partitions (v2-4) or dictionary references (v5+). */
static int rd_host_map(Rd *r, Scratch *s, int by_index, Py_ssize_t *hi) {
    int64_t count, port, refs, index, part;
    if (rd_count(r, 10, &count) < 0) return FB;
    for (int64_t i = 0; i < count; i++) {
        Text host;
        Py_ssize_t tlo, thi;
        if (rd_mutf8(r, s, &host) < 0 || rd_int(r, 4, &port) < 0) return FB;
        if (!by_index) {
            int st = rd_tps(r, s, &tlo, &thi);
            if (st < 0) return st;
        } else {
            if (rd_count(r, 8, &refs) < 0) return FB;
            const DictEnt *d = &VEC_AT(&s->dict, DictEnt, 0);
            Py_ssize_t nd = VEC_LEN(&s->dict, DictEnt);
            tlo = VEC_LEN(&s->tps, TpEnt);
            for (int64_t k = 0; k < refs; k++) {
                if (rd_int(r, 4, &index) < 0 || rd_int(r, 4, &part) < 0) return FB;
                const DictEnt *e = lookup(d, nd, index);
                TpEnt *tp = vec_push(&s->tps, sizeof(TpEnt));
                if (!tp) return ERR;
                if (e) { tp->p = e->topic.p; tp->n = e->topic.n; } else tp->isnull = 1;
                tp->partition = (int32_t)part;
            }
            thi = VEC_LEN(&s->tps, TpEnt);
        }
        HostEnt *h = vec_push(&s->hosts, sizeof(HostEnt));
        if (!h) return ERR;
        h->host = host;
        h->port = (int32_t)port;
        h->idx = VEC_LEN(&s->hosts, HostEnt) - 1;
        h->lo = tlo;
        h->hi = thi;
    }
    *hi = VEC_LEN(&s->hosts, HostEnt);
    return 0;
}

static int assignment_info(Out *o, Scratch *s, const unsigned char *b, Py_ssize_t n) {
    if (n < 4)
        return put_userdata_errorf(o, "AssignmentInfo: TruncatedError: need a 4-byte version, got %zd byte(s) (at version, offset 0)", n);
    int64_t version = (int32_t)be(b, 4), common = -1, count, err_code = 0, next_rebalance = INT64_MAX;
    if (version < 1 || version > 11)
        return put_userdata_errorf(o, "AssignmentInfo: UnsupportedVersionError: Unable to decode assignment data: used "
                                      "version: %lld; latest supported version: 11 (at version, offset 0)", (long long)version);
    Rd r = {b, n, 4};
    int named = version >= 10, st;
    if (reserve(&s->conv, n) < 0) return ERR;
    if (version >= 3 && rd_int(&r, 4, &common) < 0) return FB;
    /* active tasks: a list (wire order, repeats kept), rendered as they come */
    if (rd_count(&r, named ? 12 : 8, &count) < 0) return FB;
    Py_ssize_t active = count;
    for (int64_t i = 0; i < count; i++) {
        if (!rd_assigned_task(&r, s, named)) return PyErr_Occurred() ? ERR : FB;
    }
    if (rd_count(&r, named ? 16 : 12, &count) < 0) return FB;
    for (int64_t i = 0; i < count; i++) {
        TaskEnt *t = rd_assigned_task(&r, s, named);
        if (!t) return PyErr_Occurred() ? ERR : FB;
        Py_ssize_t at = t - &VEC_AT(&s->tasks, TaskEnt, 0), lo, hi;
        if ((st = rd_tps(&r, s, &lo, &hi)) < 0) return st;
        VEC_AT(&s->tasks, TaskEnt, at).lo = lo;
        VEC_AT(&s->tasks, TaskEnt, at).hi = hi;
    }
    Py_ssize_t hosts_hi = 0, standby_hi = 0;
    if (version >= 2 && version <= 4) {
        if ((st = rd_host_map(&r, s, 0, &hosts_hi)) < 0) return st;
    } else if (version >= 5) {
        if (rd_count(&r, 6, &count) < 0) return FB;
        for (int64_t i = 0; i < count; i++) {
            int64_t index;
            DictEnt *d = vec_push(&s->dict, sizeof(DictEnt));
            if (!d) return ERR;
            if (rd_int(&r, 4, &index) < 0 || rd_mutf8(&r, s, &d->topic) < 0) return FB;
            d->index = (int32_t)index;
            d->idx = i;
        }
        if (count > 1) qsort(s->dict.buf, count, sizeof(DictEnt), cmp_dict);
        if ((st = rd_host_map(&r, s, 1, &hosts_hi)) < 0) return st;
        if (version >= 6 && (st = rd_host_map(&r, s, 1, &standby_hi)) < 0) return st;
    }
    if (standby_hi < hosts_hi) standby_hi = hosts_hi;
    if (version >= 4 && rd_int(&r, 4, &err_code) < 0) return FB;
    if (version >= 7 && rd_int(&r, 8, &next_rebalance) < 0) return FB;
    /* the rendering: active tasks in wire order, then the sorted maps */
    if (PUTS(o, ",\"streamsUserData\":{\"version\":") < 0 || put_int(o, version) < 0 ||
        PUTS(o, ",\"commonlySupportedVersion\":") < 0 || put_int(o, common) < 0 || PUTS(o, ",\"activeTasks\":[") < 0)
        return ERR;
    for (Py_ssize_t i = 0; i < active; i++) {
        const TaskEnt *t = &VEC_AT(&s->tasks, TaskEnt, i);
        if ((i && PUTS(o, ",") < 0) || put_string(o, (const unsigned char *)s->txt.buf + t->at, t->n) < 0) return ERR;
    }
    /* standby tasks: the later entry of a task wins, sorted by task id */
    Py_ssize_t ntasks = VEC_LEN(&s->tasks, TaskEnt);
    TaskEnt *sb = &VEC_AT(&s->tasks, TaskEnt, active);
    for (Py_ssize_t i = 0; i < ntasks - active; i++) sb[i].p = (const unsigned char *)s->txt.buf + sb[i].at;
    if (ntasks - active > 1) qsort(sb, ntasks - active, sizeof(TaskEnt), cmp_task);
    if (PUTS(o, "],\"standbyTasks\":[") < 0) return ERR;
    int first = 1;
    for (Py_ssize_t i = 0; i < ntasks - active; i++) {
        if (i + 1 < ntasks - active && same_text(sb[i].p, sb[i].n, sb[i + 1].p, sb[i + 1].n)) continue;
        if ((!first && PUTS(o, ",") < 0) || PUTS(o, "[") < 0 || put_string(o, sb[i].p, sb[i].n) < 0 || PUTS(o, ",") < 0 ||
            put_tps(o, s, sb[i].lo, sb[i].hi) < 0 || PUTS(o, "]") < 0)
            return ERR;
        first = 0;
    }
    if (PUTS(o, "],\"partitionsByHost\":") < 0 || put_host_map(o, s, 0, hosts_hi) < 0 ||
        PUTS(o, ",\"standbyPartitionByHost\":") < 0 || put_host_map(o, s, hosts_hi, standby_hi) < 0 ||
        PUTS(o, ",\"errCode\":") < 0 || put_int(o, err_code) < 0 || PUTS(o, ",\"nextRebalanceMs\":") < 0 ||
        put_int(o, next_rebalance) < 0 || PUTS(o, "}") < 0)
        return ERR;
    return 0;
}

/* `,"streamsUserData":...` (or `,"streamsUserDataError":...`) of the userData of a "stream" member's
 * subscription (which 1) or assignment (which 2); FB when the Python decoder has to take it. */
static int emit_streams_userdata(int which, const Capture *user_data, Out *o) {
    if (!user_data->set || user_data->isnull) return PUTS(o, ",\"streamsUserDataError\":\"no userData\"");
    Scratch s;
    memset(&s, 0, sizeof(s));
    Py_ssize_t start = o->len;
    int r = which == 1 ? subscription_info(o, &s, user_data->p, user_data->n) : assignment_info(o, &s, user_data->p, user_data->n);
    scratch_free(&s);
    if (r < 0) o->len = start;
    return r;
}

/* `,"decoded<Field>":{"version":V,"data":{...}}` of a consumer-protocol payload (decoded at min(V, latest)
 * as the Python path does), with its Kafka Streams userdata when the protocol is "stream"; FB for the
 * Python hook. */
static int emit_nested(Ctx *ctx, const FieldPlan *f, const Scalar *payload, Out *o) {
    const Capture *name = &ctx->cap[CAP_PROTOCOL];
    int streams = name->set && !name->isnull && name->n == 6 && memcmp(name->p, "stream", 6) == 0;
    if (payload->n < 2) return FB;
    int version = (int16_t)be(payload->p, 2);
    if (version < 0) return FB;
    int latest = ctx->latest[f->hook - 1];
    PlanObject *plan = latest < 0 ? NULL : ctx->nested[f->hook - 1][version > latest ? latest : version];
    if (!plan) return FB;
    Py_ssize_t start = o->len, p = 2;
    int r;
    if (put(o, PyBytes_AS_STRING(f->hook_key), PyBytes_GET_SIZE(f->hook_key)) < 0 || PUTS(o, "{\"version\":") < 0 ||
        put_int(o, version) < 0 || PUTS(o, ",\"data\":") < 0)
        return ERR;
    ctx->cap[CAP_USER_DATA].set = 0;
    if ((r = emit_struct(plan, payload->p, payload->n, &p, o, ctx, 1)) < 0 || p != payload->n) {
        o->len = start;
        return r == ERR ? ERR : FB;
    }
    if (streams) {
        o->len--; /* the message's closing brace: the userdata goes inside */
        if ((r = emit_streams_userdata(f->hook, &ctx->cap[CAP_USER_DATA], o)) < 0) {
            o->len = start;
            return r;
        }
        if (PUTS(o, "}") < 0) return ERR;
    }
    return PUTS(o, "}");
}

static int call_hook(Ctx *ctx, const FieldPlan *f, const Scalar *payload, Out *o) {
    const Capture *type = &ctx->cap[CAP_PROTOCOL_TYPE], *name = &ctx->cap[CAP_PROTOCOL];
    if (payload->isnull || payload->n == 0 || !type->set || type->isnull || type->n != 8 || memcmp(type->p, "consumer", 8))
        return 0;
    int nested = emit_nested(ctx, f, payload, o);
    if (nested != FB) return nested;
    PyObject *protocol = PyUnicode_DecodeUTF8(name->set && !name->isnull ? (const char *)name->p : "",
                                              name->set && !name->isnull ? name->n : 0, NULL);
    if (!protocol) return ERR;
    PyObject *data = PyBytes_FromStringAndSize((const char *)payload->p, payload->n);
    if (!data) { Py_DECREF(protocol); return ERR; }
    PyObject *which = PyLong_FromLong(f->hook);
    PyObject *r = which ? PyObject_CallFunctionObjArgs(ctx->hook, which, protocol, data, NULL) : NULL;
    Py_XDECREF(which);
    Py_DECREF(protocol);
    Py_DECREF(data);
    if (!r) return ERR;
    int status = 0;
    if (r != Py_None) {
        if (!PyBytes_Check(r)) {
            PyErr_SetString(PyExc_TypeError, "the nested-payload hook must return bytes or None");
            status = ERR;
        } else if (put(o, PyBytes_AS_STRING(f->hook_key), PyBytes_GET_SIZE(f->hook_key)) < 0 ||
                   put(o, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r)) < 0) {
            status = ERR;
        }
    }
    Py_DECREF(r);
    return status;
}

enum { MAX_FIELDS = 64 };

/* A struct at *pos as a JSON object: regular fields in order, then its tagged section (tagged fields
 * come last in spec order: the plan builder makes sure of it), then any decoded nested payloads. */
static int emit_struct(PlanObject *pl, const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, Out *o, Ctx *ctx,
                       int top) {
    int r, first = 1, nregular = pl->nfields;
    Scalar hooked[MAX_FIELDS];
    if (pl->nfields > MAX_FIELDS) return FB;
    if (PUTS(o, "{") < 0) return ERR;
    for (int i = 0; i < pl->nfields; i++) {
        const FieldPlan *f = &pl->fields[i];
        if (f->tag >= 0) { nregular = i; break; }
        if (!first && PUTS(o, ",") < 0) return ERR;
        first = 0;
        if (put(o, PyBytes_AS_STRING(f->key), PyBytes_GET_SIZE(f->key)) < 0) return ERR;
        Scalar v;
        if ((r = emit_value(f, pl->flexible, b, end, pos, o, ctx, &v)) < 0) return r;
        if (top && f->capture >= 0 && !f->array && f->kind != K_STRUCT) capture(ctx, f, &v);
        if (f->hook) hooked[i] = v;
    }
    if (pl->flexible) {
        if (*pos >= end) return FB;
        if (b[*pos] == 0) {
            (*pos)++;
        } else {
            uint32_t nt;
            if (read_uvarint(b, end, pos, &nt) < 0) return FB;
            Py_ssize_t at[MAX_FIELDS], stop[MAX_FIELDS];
            for (int i = nregular; i < pl->nfields; i++) at[i] = -1;
            int64_t last = -1;
            for (uint32_t k = 0; k < nt; k++) {
                uint32_t tag, size;
                if (read_uvarint(b, end, pos, &tag) < 0 || read_uvarint(b, end, pos, &size) < 0) return FB;
                if ((int64_t)tag <= last || size > end - *pos) return FB;
                last = tag;
                for (int i = nregular; i < pl->nfields; i++) {
                    if (pl->fields[i].tag == (int)tag) { at[i] = *pos; stop[i] = *pos + size; }
                }
                *pos += size;
            }
            for (int i = nregular; i < pl->nfields; i++) {
                if (at[i] < 0) continue;
                Py_ssize_t p = at[i], before = o->len;
                if ((r = emit_tagged(&pl->fields[i], b, stop[i], &p, o, ctx, &first)) < 0) return r;
                if (p != stop[i] || (pl->fields[i].early && o->len != before)) return FB;
            }
        }
    }
    if (pl->has_hooks && ctx->hook) {
        for (int i = 0; i < nregular; i++) {
            if (pl->fields[i].hook && (r = call_hook(ctx, &pl->fields[i], &hooked[i], o)) < 0) return r;
        }
    }
    return PUTS(o, "}");
}

/* ------------------------------------------------------------------ CRC32C */

static uint32_t crc_table[8][256];
static int crc_hw = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_soft(uint32_t c, const unsigned char *p, Py_ssize_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
            crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
            crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse(uint32_t c, const unsigned char *p, Py_ssize_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static uint32_t crc32c(const unsigned char *p, Py_ssize_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw) return ~crc_sse(0xffffffffu, p, n);
#endif
    return ~crc_soft(0xffffffffu, p, n);
}

/* ------------------------------------------------------------------ batches and records */

enum { MAX_TYPES = 64, MAX_VERSIONS = 32, V2_HEADER = 61 };

typedef struct {
    int64_t offset, timestamp;
    const unsigned char *key, *value;
    Py_ssize_t key_len, value_len; /* -1: null */
} Rec;

typedef struct {
    PyObject_HEAD
    PyObject *key_plans[MAX_TYPES];
    PyObject *value_plans[MAX_TYPES][MAX_VERSIONS];
    PyObject *earlier_plans[MAX_TYPES][MAX_VERSIONS]; /* a layout Kafka changed in place: the one before */
    PyObject *layout_tails[MAX_TYPES];                /* bytes: `,"layout":"<earlier spec>"` */
    PyObject *heads[MAX_TYPES];   /* bytes: `"recordType":"Name","key":` */
    PyObject *names[MAX_TYPES];   /* str: the type's name */
    uint64_t member_types;        /* types whose records `derive` gets in rows() */
    PyObject *hook, *decompress, *fallback, *nested_refs, *empty;
    PlanObject *nested[2][NESTED_VERSIONS];
    int latest[2];
    Py_ssize_t max_records;
    Out out, scratch;
    Rec *recs;
    Py_ssize_t nrecs_cap;
} DecoderObject;

typedef struct {
    int64_t base_offset, last_offset, max_ts, producer_id;
    int32_t leader_epoch, count;
    int16_t producer_epoch, attributes;
    uint32_t crc;
    Py_ssize_t size;
    PyObject *inflated; /* owns the decompressed payload */
} Batch;

static const char *CODECS[] = {"none", "gzip", "snappy", "lz4", "zstd"};

/* The batch at `pos` and its records, or FB for anything the Python reader should take. */
static int read_batch(DecoderObject *self, const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, Batch *bt) {
    bt->inflated = NULL;
    if (end - pos < V2_HEADER || d[pos + 16] != 2) return FB;
    const unsigned char *h = d + pos;
    int32_t length = (int32_t)be(h + 8, 4);
    if (length < V2_HEADER - 12 || (Py_ssize_t)length + 12 > end - pos) return FB;
    bt->size = (Py_ssize_t)length + 12;
    bt->base_offset = be(h, 8);
    bt->leader_epoch = (int32_t)be(h + 12, 4);
    bt->crc = (uint32_t)be(h + 17, 4);
    bt->attributes = (int16_t)be(h + 21, 2);
    bt->last_offset = bt->base_offset + (int32_t)be(h + 23, 4);
    int64_t base_ts = be(h + 27, 8);
    bt->max_ts = be(h + 35, 8);
    bt->producer_id = be(h + 43, 8);
    bt->producer_epoch = (int16_t)be(h + 51, 2);
    bt->count = (int32_t)be(h + 57, 4);
    int codec = bt->attributes & 7;
    if (codec > 4 || bt->count < 0 || bt->count > self->max_records) return FB;
    if (crc32c(h + 21, bt->size - 21) != bt->crc) return FB;
    const unsigned char *b = h + V2_HEADER;
    Py_ssize_t n = bt->size - V2_HEADER;
    if (codec && n) {
        PyObject *raw = PyBytes_FromStringAndSize((const char *)b, n);
        if (!raw) return ERR;
        PyObject *c = PyLong_FromLong(codec);
        bt->inflated = c ? PyObject_CallFunctionObjArgs(self->decompress, c, raw, NULL) : NULL;
        Py_XDECREF(c);
        Py_DECREF(raw);
        if (!bt->inflated || !PyBytes_Check(bt->inflated)) {  /* the Python reader reports it */
            Py_CLEAR(bt->inflated);
            PyErr_Clear();
            return FB;
        }
        b = (const unsigned char *)PyBytes_AS_STRING(bt->inflated);
        n = PyBytes_GET_SIZE(bt->inflated);
    }
    if ((int64_t)bt->count * 7 > n) goto fallback;
    if (bt->count > self->nrecs_cap) {
        Rec *r = PyMem_Realloc(self->recs, sizeof(Rec) * bt->count);
        if (!r) { Py_CLEAR(bt->inflated); PyErr_NoMemory(); return ERR; }
        self->recs = r;
        self->nrecs_cap = bt->count;
    }
    int log_append = bt->attributes & 0x08;
    Py_ssize_t p = 0;
    for (int32_t i = 0; i < bt->count; i++) {
        Rec *rec = &self->recs[i];
        int64_t len, ts_delta, off_delta, ks, vs, headers;
        if (read_zigzag(b, n, &p, 5, &len) < 0 || len < 0 || len > n - p) goto fallback;
        Py_ssize_t rend = p + len;
        p++; /* attributes */
        if (read_zigzag(b, rend, &p, 10, &ts_delta) < 0 || read_zigzag(b, rend, &p, 5, &off_delta) < 0) goto fallback;
        if (read_zigzag(b, rend, &p, 5, &ks) < 0 || ks < -1 || ks > rend - p) goto fallback;
        rec->key = b + p;
        rec->key_len = ks;
        if (ks > 0) p += ks;
        if (read_zigzag(b, rend, &p, 5, &vs) < 0 || vs < -1 || vs > rend - p) goto fallback;
        rec->value = b + p;
        rec->value_len = vs;
        if (vs > 0) p += vs;
        if (read_zigzag(b, rend, &p, 5, &headers) < 0 || headers != 0 || p != rend) goto fallback;
        rec->offset = bt->base_offset + off_delta;
        rec->timestamp = log_append ? bt->max_ts : base_ts + ts_delta;
    }
    if (p != n) goto fallback;
    return 0;
fallback:
    Py_CLEAR(bt->inflated);
    return FB;
}

/* `"batch":{...}` of kafka-dump-log's batch fields, then `,"producerId":P` for a transactional batch. */
static int put_batch_fields(Out *o, const Batch *bt, Py_ssize_t position) {
    int txn = (bt->attributes & 0x10) != 0;
    if (PUTS(o, "\"batch\":{\"baseOffset\":") < 0 || put_int(o, bt->base_offset) < 0 ||
        PUTS(o, ",\"lastOffset\":") < 0 || put_int(o, bt->last_offset) < 0 ||
        PUTS(o, ",\"position\":") < 0 || put_int(o, position) < 0 ||
        PUTS(o, ",\"createTime\":") < 0 || put_int(o, bt->max_ts) < 0 ||
        PUTS(o, ",\"size\":") < 0 || put_int(o, bt->size) < 0 ||
        PUTS(o, ",\"compression\":\"") < 0 || put(o, CODECS[bt->attributes & 7], strlen(CODECS[bt->attributes & 7])) < 0 ||
        PUTS(o, "\",\"crc\":") < 0 || put_int(o, bt->crc) < 0 ||
        PUTS(o, ",\"isValid\":true,\"producerId\":") < 0 || put_int(o, bt->producer_id) < 0 ||
        PUTS(o, ",\"producerEpoch\":") < 0 || put_int(o, bt->producer_epoch) < 0 ||
        PUTS(o, ",\"partitionLeaderEpoch\":") < 0 || put_int(o, bt->leader_epoch) < 0 ||
        (txn ? PUTS(o, ",\"isTransactional\":true") : PUTS(o, ",\"isTransactional\":false")) < 0 ||
        ((bt->attributes & 0x20) ? PUTS(o, ",\"isControl\":true}") : PUTS(o, ",\"isControl\":false}")) < 0)
        return ERR;
    if (txn && (PUTS(o, ",\"producerId\":") < 0 || put_int(o, bt->producer_id) < 0)) return ERR;
    return 0;
}

/* The record's type and its value's plan (NULL for a tombstone); FB when the plans do not take it. */
static int plans_of(DecoderObject *self, const Rec *rec, Ctx *ctx, int *type, int *version, PlanObject **vplan) {
    memset(ctx->cap, 0, sizeof(ctx->cap));
    *vplan = NULL;
    if (rec->key_len < 2) return FB;
    *type = (int16_t)be(rec->key, 2);
    if (*type < 0 || *type >= MAX_TYPES || !self->key_plans[*type]) return FB;
    if (rec->value_len >= 0) {
        if (rec->value_len < 2) return FB;
        *version = (int16_t)be(rec->value, 2);
        if (*version < 0 || *version >= MAX_VERSIONS || !self->value_plans[*type][*version]) return FB;
        *vplan = (PlanObject *)self->value_plans[*type][*version];
    }
    return 0;
}

/* `{"type":N,"data":{...}}` of a record's key (decode_record's "key"). */
static int emit_key_doc(DecoderObject *self, const Rec *rec, int type, Out *o, Ctx *ctx) {
    Py_ssize_t p = 2;
    int r;
    if (PUTS(o, "{\"type\":") < 0 || put_int(o, type) < 0 || PUTS(o, ",\"data\":") < 0) return ERR;
    if ((r = emit_struct((PlanObject *)self->key_plans[type], rec->key, rec->key_len, &p, o, ctx, 1)) < 0) return r;
    if (p != rec->key_len) return FB;
    return PUTS(o, "}");
}

/* `{"version":V,"data":{...}}` of a record's value (decode_record's "value"); a value the current layout
 * does not read, read with the layout Kafka changed in place, is `{"version":V,"data":{...},"layout":"..."}`. */
static int emit_value_doc(DecoderObject *self, const Rec *rec, int type, int version, PlanObject *vplan, Out *o,
                          Ctx *ctx) {
    Py_ssize_t p = 2;
    int r;
    if (PUTS(o, "{\"version\":") < 0 || put_int(o, version) < 0 || PUTS(o, ",\"data\":") < 0) return ERR;
    Py_ssize_t data_at = o->len;
    if ((r = emit_struct(vplan, rec->value, rec->value_len, &p, o, ctx, 1)) == ERR) return ERR;
    if (r == 0 && p == rec->value_len) return PUTS(o, "}");
    PlanObject *earlier = (PlanObject *)self->earlier_plans[type][version];
    if (!earlier) return FB;
    o->len = data_at;
    p = 2;
    if ((r = emit_struct(earlier, rec->value, rec->value_len, &p, o, ctx, 1)) < 0) return r;
    if (p != rec->value_len) return FB;
    PyObject *tail = self->layout_tails[type];
    if (put(o, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail)) < 0) return ERR;
    return PUTS(o, "}");
}

/* `"recordType":...,"key":{...},"value":...` of one record; FB for the Python decoder. */
static int emit_record(DecoderObject *self, const Rec *rec, Out *o, Ctx *ctx) {
    int type, version, r;
    PlanObject *vplan;
    if ((r = plans_of(self, rec, ctx, &type, &version, &vplan)) < 0) return r;
    PyObject *head = self->heads[type];
    if (put(o, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head)) < 0) return ERR;
    if ((r = emit_key_doc(self, rec, type, o, ctx)) < 0) return r;
    if (PUTS(o, ",\"value\":") < 0) return ERR;
    return vplan ? emit_value_doc(self, rec, type, version, vplan, o, ctx) : PUTS(o, "null");
}

/* Whether every record of a control batch is a transaction marker (COMMIT or ABORT). */
static int plain_markers(const Rec *recs, int32_t count) {
    for (int32_t i = 0; i < count; i++) {
        if (recs[i].key_len < 4 || recs[i].value_len < 6) return 0;
        int type = (int16_t)be(recs[i].key + 2, 2);
        if (type != 0 && type != 1) return 0;
    }
    return 1;
}

/* `"control":{"type":"COMMIT","version":V,"coordinatorEpoch":E}` of a marker (see decode_control). */
static int put_marker(Out *o, const Rec *rec) {
    int commit = (int16_t)be(rec->key + 2, 2) == 1;
    if ((commit ? PUTS(o, "\"control\":{\"type\":\"COMMIT\",\"version\":") : PUTS(o, "\"control\":{\"type\":\"ABORT\",\"version\":")) < 0 ||
        put_int(o, (int16_t)be(rec->value, 2)) < 0 || PUTS(o, ",\"coordinatorEpoch\":") < 0 ||
        put_int(o, (int32_t)be(rec->value + 2, 4)) < 0 || PUTS(o, "}") < 0)
        return ERR;
    return 0;
}

static PyObject *rec_bytes(const unsigned char *p, Py_ssize_t n) {
    if (n < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p, n);
}

/* fallback(offset, timestamp, key, value) for a record the plans do not take. */
static PyObject *call_fallback(DecoderObject *self, const Rec *rec) {
    PyObject *off = PyLong_FromLongLong(rec->offset), *ts = PyLong_FromLongLong(rec->timestamp);
    PyObject *k = rec_bytes(rec->key, rec->key_len), *v = rec_bytes(rec->value, rec->value_len);
    PyObject *r = off && ts && k && v ? PyObject_CallFunctionObjArgs(self->fallback, off, ts, k, v, NULL) : NULL;
    Py_XDECREF(off); Py_XDECREF(ts); Py_XDECREF(k); Py_XDECREF(v);
    return r;
}

static void Decoder_dealloc(DecoderObject *self) {
    PyObject_GC_UnTrack(self);
    for (int t = 0; t < MAX_TYPES; t++) {
        Py_CLEAR(self->key_plans[t]);
        Py_CLEAR(self->names[t]);
        Py_CLEAR(self->heads[t]);
        Py_CLEAR(self->layout_tails[t]);
        for (int v = 0; v < MAX_VERSIONS; v++) {
            Py_CLEAR(self->value_plans[t][v]);
            Py_CLEAR(self->earlier_plans[t][v]);
        }
    }
    Py_CLEAR(self->hook);
    Py_CLEAR(self->decompress);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->nested_refs);
    Py_CLEAR(self->empty);
    PyMem_RawFree(self->out.buf);
    PyMem_RawFree(self->scratch.buf);
    PyMem_Free(self->recs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Decoder_traverse(DecoderObject *self, visitproc visit, void *arg) {
    for (int t = 0; t < MAX_TYPES; t++) {
        Py_VISIT(self->key_plans[t]);
        for (int v = 0; v < MAX_VERSIONS; v++) {
            Py_VISIT(self->value_plans[t][v]);
            Py_VISIT(self->earlier_plans[t][v]);
        }
    }
    Py_VISIT(self->hook);
    Py_VISIT(self->decompress);
    Py_VISIT(self->fallback);
    Py_VISIT(self->nested_refs);
    return 0;
}

/* Decoder(types, nested, hook, decompress, fallback, max_records): `types` maps a record type to
 * (key plan, {value version: plan}, JSON head bytes, name, whether rows() derives member rows); `nested` holds the plans of the consumer-protocol
 * subscription and assignment, one per version from 0. */
static PyObject *Decoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *types, *nested, *hook, *decompress, *fallback;
    Py_ssize_t max_records;
    if (!PyArg_ParseTuple(args, "O!O!OOOn", &PyDict_Type, &types, &PyTuple_Type, &nested, &hook, &decompress,
                          &fallback, &max_records))
        return NULL;
    if (PyTuple_GET_SIZE(nested) != 2) {
        PyErr_SetString(PyExc_ValueError, "nested: (subscription plans, assignment plans)");
        return NULL;
    }
    DecoderObject *self = (DecoderObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->nested_refs = Py_NewRef(nested);
    if (!(self->empty = PyBytes_FromStringAndSize(NULL, 0))) { Py_DECREF(self); return NULL; }
    for (int w = 0; w < 2; w++) {
        PyObject *plans = PyTuple_GET_ITEM(nested, w);
        if (!PyTuple_Check(plans) || PyTuple_GET_SIZE(plans) > NESTED_VERSIONS) {
            PyErr_SetString(PyExc_ValueError, "nested plans: a tuple of at most 8 plans");
            Py_DECREF(self);
            return NULL;
        }
        self->latest[w] = (int)PyTuple_GET_SIZE(plans) - 1;
        for (int v = 0; v <= self->latest[w]; v++) {
            PyObject *pl = PyTuple_GET_ITEM(plans, v);
            if (!PyObject_TypeCheck(pl, &PlanType)) {
                PyErr_SetString(PyExc_TypeError, "nested plans must be Plans");
                Py_DECREF(self);
                return NULL;
            }
            self->nested[w][v] = (PlanObject *)pl;
        }
    }
    self->hook = Py_NewRef(hook);
    self->decompress = Py_NewRef(decompress);
    self->fallback = Py_NewRef(fallback);
    self->max_records = max_records;
    PyObject *k, *v;
    Py_ssize_t i = 0;
    while (PyDict_Next(types, &i, &k, &v)) {
        long t = PyLong_AsLong(k);
        PyObject *kp, *values, *head, *name, *earlier = NULL, *tail = NULL;
        int member;
        if ((t == -1 && PyErr_Occurred()) || t < 0 || t >= MAX_TYPES ||
            !PyArg_ParseTuple(v, "O!O!SUp|O!S", &PlanType, &kp, &PyDict_Type, &values, &head, &name, &member,
                              &PyDict_Type, &earlier, &tail) || (earlier && !tail)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "record type out of range");
            Py_DECREF(self);
            return NULL;
        }
        Py_XSETREF(self->key_plans[t], Py_NewRef(kp));
        Py_XSETREF(self->names[t], Py_NewRef(name));
        Py_XSETREF(self->heads[t], Py_NewRef(head));
        if (member) self->member_types |= (uint64_t)1 << t;
        PyObject *vk, *vv;
        Py_ssize_t j = 0;
        while (PyDict_Next(values, &j, &vk, &vv)) {
            long ver = PyLong_AsLong(vk);
            if ((ver == -1 && PyErr_Occurred()) || ver < 0 || ver >= MAX_VERSIONS || !PyObject_TypeCheck(vv, &PlanType)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad value plan");
                Py_DECREF(self);
                return NULL;
            }
            Py_XSETREF(self->value_plans[t][ver], Py_NewRef(vv));
        }
        if (!earlier) continue;
        Py_XSETREF(self->layout_tails[t], Py_NewRef(tail));
        for (j = 0; PyDict_Next(earlier, &j, &vk, &vv);) {
            long ver = PyLong_AsLong(vk);
            if ((ver == -1 && PyErr_Occurred()) || ver < 0 || ver >= MAX_VERSIONS || !PyObject_TypeCheck(vv, &PlanType) ||
                !self->value_plans[t][ver]) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad earlier-layout plan");
                Py_DECREF(self);
                return NULL;
            }
            Py_XSETREF(self->earlier_plans[t][ver], Py_NewRef(vv));
        }
    }
    return (PyObject *)self;
}

/* lines(buffer, pos, end, head, limit) -> (bytes, pos, written, stopped): JSON lines of the batches from
 * `pos`, each starting with `head` (`{"segment":"...","offset":`), until `end`, about 1 MiB of output,
 * `limit` lines (-1: no limit), or a batch for the Python reader (`stopped`, `pos` at that batch). */
static PyObject *Decoder_lines(DecoderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t pos, end, limit;
    if (nargs != 5 || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "lines(buffer, pos, end, head: bytes, limit)");
        return NULL;
    }
    if ((pos = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((end = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if ((limit = PyLong_AsSsize_t(args[4])) == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos/end outside the buffer");
        return NULL;
    }
    const unsigned char *d = view.buf;
    const char *head = PyBytes_AS_STRING(args[3]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[3]);
    Out *o = &self->out, *bf = &self->scratch;
    o->len = 0;
    Ctx ctx;
    ctx.hook = self->hook;
    memcpy(ctx.nested, self->nested, sizeof(ctx.nested));
    memcpy(ctx.latest, self->latest, sizeof(ctx.latest));
    Py_ssize_t written = 0;
    int stopped = 0, status = 0;
    while (pos < end && o->len < (1 << 20) && (limit < 0 || written < limit)) {
        Batch bt;
        int r = read_batch(self, d, pos, end, &bt);
        if (r == ERR) { status = ERR; break; }
        if (r == FB) { stopped = 1; break; }
        int control = (bt.attributes & 0x20) != 0;
        if (control && !plain_markers(self->recs, bt.count)) {
            Py_XDECREF(bt.inflated);
            stopped = 1;
            break;
        }
        bf->len = 0;
        if (put_batch_fields(bf, &bt, pos) < 0) { Py_XDECREF(bt.inflated); status = ERR; break; }
        for (int32_t i = 0; i < bt.count && (limit < 0 || written < limit); i++) {
            const Rec *rec = &self->recs[i];
            Py_ssize_t line = o->len;
            if (put(o, head, head_len) < 0 || put_int(o, rec->offset) < 0 || PUTS(o, ",\"timestamp\":") < 0 ||
                put_int(o, rec->timestamp) < 0 || PUTS(o, ",") < 0 || put(o, bf->buf, bf->len) < 0 ||
                PUTS(o, ",") < 0) { status = ERR; break; }
            r = control ? put_marker(o, rec) : emit_record(self, rec, o, &ctx);
            if (r == ERR) { status = ERR; break; }
            if (r == FB) {
                o->len = line;
                PyObject *tail = call_fallback(self, rec);
                if (!tail) { status = ERR; break; }
                if (tail == Py_None) { Py_DECREF(tail); continue; }
                if (!PyBytes_Check(tail)) {
                    Py_DECREF(tail);
                    PyErr_SetString(PyExc_TypeError, "the fallback must return bytes or None");
                    status = ERR;
                    break;
                }
                int bad = put(o, head, head_len) < 0 || put_int(o, rec->offset) < 0 || PUTS(o, ",\"timestamp\":") < 0 ||
                          put_int(o, rec->timestamp) < 0 || PUTS(o, ",") < 0 || put(o, bf->buf, bf->len) < 0 ||
                          PUTS(o, ",") < 0 || put(o, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail)) < 0;
                Py_DECREF(tail);
                if (bad) { status = ERR; break; }
            }
            if (PUTS(o, "}\n") < 0) { status = ERR; break; }
            written++;
        }
        Py_XDECREF(bt.inflated);
        if (status) break;
        pos += bt.size;
    }
    PyBuffer_Release(&view);
    if (status) return NULL;
    PyObject *chunk = PyBytes_FromStringAndSize(o->buf, o->len);
    if (!chunk) return NULL;
    return Py_BuildValue("(NnnO)", chunk, pos, written, stopped ? Py_True : Py_False);
}

/* ------------------------------------------------------------------ pipeline columns */

/* A finished Arrow buffer (validity bitmap, values, string offsets or data): owns its memory and lends
 * it read-only through the buffer protocol, so `pyarrow.py_buffer` wraps it without a copy. */
typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len;
} BufferObject;

static void Buffer_dealloc(BufferObject *self) {
    PyMem_RawFree(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf, self->len, 1, flags);
}

static Py_ssize_t Buffer_length(BufferObject *self) { return self->len; }

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, NULL};
static PySequenceMethods Buffer_as_sequence = {.sq_length = (lenfunc)Buffer_length};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol.coordinator_topics._offsets.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
};

/* The bytes of `o` as a Buffer (`o` is left empty). */
static PyObject *take(Out *o) {
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) return NULL;
    char *buf = o->buf;
    if (!buf) {
        if (!(buf = PyMem_RawMalloc(1))) { Py_DECREF(b); return PyErr_NoMemory(); }
    } else if (o->cap > o->len) {
        char *shrunk = PyMem_RawRealloc(buf, o->len ? o->len : 1);
        if (shrunk) buf = shrunk;
    }
    b->buf = buf;
    b->len = o->len;
    o->buf = NULL;
    o->len = o->cap = 0;
    return (PyObject *)b;
}

/* Column kinds, as kprotocol.pipeline.tables.COLUMN_KINDS names them (SKIP: filled in Python). */
enum { COL_SKIP = -1, COL_STR, COL_I32, COL_I64, COL_BOOL };
enum { MAX_COLUMNS = 64 };

/* One column in Arrow's layout: validity bitmap, values (int32/int64, bits for bool, int32 offsets
 * for strings) and UTF-8 data. A string column whose data would pass `max_chunk` bytes (int32
 * offsets) is cut: the chunk so far is sealed, and a new one starts with the value. */
typedef struct {
    int kind;
    Py_ssize_t n, nulls; /* rows and nulls of the open chunk */
    Out valid, values, data;
    PyObject *sealed;    /* list of (length, null_count, validity | None, values, data | None) */
} Column;

typedef struct {
    PyObject_HEAD
    int ncols, broken, busy; /* busy: a Decoder.columns call is filling it */
    Column *cols;
    PyObject *names;     /* tuple of str */
    Py_ssize_t rows, max_chunk;
} ColumnsObject;

static PyTypeObject ColumnsType;

static inline int bit_push(Out *o, Py_ssize_t n, int bit) {
    if ((n & 7) == 0) {
        if (reserve(o, 1) < 0) return ERR;
        o->buf[o->len++] = 0;
    }
    if (bit) o->buf[n >> 3] |= (char)(1u << (n & 7));
    return 0;
}

static int col_open(Column *c) {
    c->n = c->nulls = 0;
    if (c->kind == COL_STR) {
        int32_t zero = 0;
        return put(&c->values, &zero, 4);
    }
    return 0;
}

/* The open chunk as a tuple on `sealed`; a new chunk opens. */
static int col_seal(Column *c) {
    PyObject *valid = c->nulls ? take(&c->valid) : Py_NewRef(Py_None);
    PyObject *values = take(&c->values);
    PyObject *data = c->kind == COL_STR ? take(&c->data) : Py_NewRef(Py_None);
    c->valid.len = 0;
    PyObject *chunk = valid && values && data ? Py_BuildValue("(nnOOO)", c->n, c->nulls, valid, values, data) : NULL;
    Py_XDECREF(valid);
    Py_XDECREF(values);
    Py_XDECREF(data);
    if (!chunk) return ERR;
    int r = PyList_Append(c->sealed, chunk);
    Py_DECREF(chunk);
    if (r < 0) return ERR;
    return col_open(c);
}

static inline int col_null(Column *c) {
    if (bit_push(&c->valid, c->n, 0) < 0) return ERR;
    int r = 0;
    switch (c->kind) {
    case COL_STR: { int32_t at = (int32_t)c->data.len; r = put(&c->values, &at, 4); break; }
    case COL_I32: { int32_t zero = 0; r = put(&c->values, &zero, 4); break; }
    case COL_I64: { int64_t zero = 0; r = put(&c->values, &zero, 8); break; }
    case COL_BOOL: r = bit_push(&c->values, c->n, 0); break;
    }
    if (r < 0) return ERR;
    c->nulls++;
    c->n++;
    return 0;
}

static inline int col_i64(Column *c, int64_t v) {
    if (bit_push(&c->valid, c->n, 1) < 0 || put(&c->values, &v, 8) < 0) return ERR;
    c->n++;
    return 0;
}

static inline int col_i32(Column *c, int64_t v) {
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%lld does not fit an int32 column", (long long)v);
        return ERR;
    }
    int32_t w = (int32_t)v;
    if (bit_push(&c->valid, c->n, 1) < 0 || put(&c->values, &w, 4) < 0) return ERR;
    c->n++;
    return 0;
}

static inline int col_bool(Column *c, int v) {
    if (bit_push(&c->valid, c->n, 1) < 0 || bit_push(&c->values, c->n, v) < 0) return ERR;
    c->n++;
    return 0;
}

/* A string value whose UTF-8 was written to the column's data from `start` on. */
static int col_str_end(ColumnsObject *t, Column *c, Py_ssize_t start) {
    if (c->data.len > t->max_chunk) {
        Py_ssize_t size = c->data.len - start;
        c->data.len = start;
        if (size > t->max_chunk) {
            PyErr_Format(PyExc_ValueError, "a value of %zd bytes is longer than a string array holds", size);
            return ERR;
        }
        char *value = PyMem_RawMalloc(size ? size : 1);
        if (!value) { PyErr_NoMemory(); return ERR; }
        memcpy(value, c->data.buf + start, size);
        int r = col_seal(c) < 0 || put(&c->data, value, size) < 0 ? ERR : 0;
        PyMem_RawFree(value);
        if (r < 0) return ERR;
    }
    int32_t at = (int32_t)c->data.len;
    if (bit_push(&c->valid, c->n, 1) < 0 || put(&c->values, &at, 4) < 0) return ERR;
    c->n++;
    return 0;
}

static inline int col_str(ColumnsObject *t, Column *c, const char *p, Py_ssize_t n) {
    Py_ssize_t start = c->data.len;
    if (put(&c->data, p, n) < 0) return ERR;
    return col_str_end(t, c, start);
}

static void Columns_dealloc(ColumnsObject *self) {
    for (int i = 0; self->cols && i < self->ncols; i++) {
        Column *c = &self->cols[i];
        PyMem_RawFree(c->valid.buf);
        PyMem_RawFree(c->values.buf);
        PyMem_RawFree(c->data.buf);
        Py_XDECREF(c->sealed);
    }
    PyMem_Free(self->cols);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Columns(names, kinds, max_chunk=2**31 - 1): a table's column builder (kinds: COL_*, -1 for a column
 * filled in Python, such as a split's constant topic). */
static PyObject *Columns_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"names", "kinds", "max_chunk", NULL};
    PyObject *names, *kinds;
    Py_ssize_t max_chunk = INT32_MAX;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!|n", kwlist, &PyTuple_Type, &names, &PyTuple_Type, &kinds,
                                     &max_chunk))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n != PyTuple_GET_SIZE(kinds) || n < 1 || n > MAX_COLUMNS || max_chunk < 1 || max_chunk > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "Columns: 1 to 64 names, a kind each, 0 < max_chunk < 2**31");
        return NULL;
    }
    ColumnsObject *self = (ColumnsObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->max_chunk = max_chunk;
    self->names = Py_NewRef(names);
    self->cols = PyMem_Calloc(n, sizeof(Column));
    if (!self->cols) { Py_DECREF(self); return PyErr_NoMemory(); }
    self->ncols = (int)n;
    for (int i = 0; i < n; i++) {
        Column *c = &self->cols[i];
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        if (kind == -1 && PyErr_Occurred()) { Py_DECREF(self); return NULL; }
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i)) || kind < COL_SKIP || kind > COL_BOOL) {
            PyErr_SetString(PyExc_ValueError, "Columns: names are str, kinds -1 to 3");
            Py_DECREF(self);
            return NULL;
        }
        c->kind = (int)kind;
        if (!(c->sealed = PyList_New(0)) || col_open(c) < 0) { Py_DECREF(self); return NULL; }
    }
    return (PyObject *)self;
}

static int usable(ColumnsObject *self) {
    if (!self->broken) return 0;
    PyErr_SetString(PyExc_RuntimeError, "a column builder that failed in the middle of a row");
    return ERR;
}

/* append(row: dict): one row; a missing key or None is null, a str column takes str, int columns int,
 * bool columns anything (its truth). Nothing is appended when a value does not fit. */
static PyObject *Columns_append(ColumnsObject *self, PyObject *row) {
    if (usable(self) < 0) return NULL;
    if (!PyDict_Check(row)) {
        PyErr_SetString(PyExc_TypeError, "append(row: dict)");
        return NULL;
    }
    Scalar v[MAX_COLUMNS];
    for (int i = 0; i < self->ncols; i++) {
        const Column *c = &self->cols[i];
        if (c->kind == COL_SKIP) continue;
        PyObject *name = PyTuple_GET_ITEM(self->names, i);
        PyObject *x = PyDict_GetItemWithError(row, name);
        v[i].isnull = !x || x == Py_None;
        if (!x && PyErr_Occurred()) return NULL;
        if (v[i].isnull) continue;
        if (c->kind == COL_STR) {
            if (!PyUnicode_Check(x)) {
                PyErr_Format(PyExc_TypeError, "column %R takes str, not %.100s", name, Py_TYPE(x)->tp_name);
                return NULL;
            }
            if (!(v[i].p = (const unsigned char *)PyUnicode_AsUTF8AndSize(x, &v[i].n))) return NULL;
        } else if (c->kind == COL_BOOL) {
            if ((v[i].i = PyObject_IsTrue(x)) < 0) return NULL;
        } else {
            if (!PyLong_Check(x)) {
                PyErr_Format(PyExc_TypeError, "column %R takes int, not %.100s", name, Py_TYPE(x)->tp_name);
                return NULL;
            }
            int overflow;
            v[i].i = PyLong_AsLongLongAndOverflow(x, &overflow);
            if ((v[i].i == -1 && PyErr_Occurred())) return NULL;
            if (overflow || (c->kind == COL_I32 && (v[i].i < INT32_MIN || v[i].i > INT32_MAX))) {
                PyErr_Format(PyExc_OverflowError, "column %R: %R is out of range", name, x);
                return NULL;
            }
        }
    }
    for (int i = 0; i < self->ncols; i++) {
        Column *c = &self->cols[i];
        int r = 0;
        if (c->kind == COL_SKIP) continue;
        if (v[i].isnull) r = col_null(c);
        else if (c->kind == COL_STR) r = col_str(self, c, (const char *)v[i].p, v[i].n);
        else if (c->kind == COL_BOOL) r = col_bool(c, (int)v[i].i);
        else if (c->kind == COL_I32) r = col_i32(c, v[i].i);
        else r = col_i64(c, v[i].i);
        if (r < 0) { self->broken = 1; return NULL; }
    }
    self->rows++;
    Py_RETURN_NONE;
}

/* finish() -> (rows, columns): every column's chunks (None for a skipped column); the builder starts over. */
static PyObject *Columns_finish(ColumnsObject *self, PyObject *unused) {
    if (usable(self) < 0) return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "finish() while Decoder.columns fills the builder");
        return NULL;
    }
    PyObject *columns = PyList_New(self->ncols);
    if (!columns) return NULL;
    for (int i = 0; i < self->ncols; i++) {
        Column *c = &self->cols[i];
        if (c->kind == COL_SKIP) {
            PyList_SET_ITEM(columns, i, Py_NewRef(Py_None));
            continue;
        }
        PyObject *fresh = PyList_New(0);
        if (!fresh || col_seal(c) < 0) {
            Py_XDECREF(fresh);
            Py_DECREF(columns);
            self->broken = 1;
            return NULL;
        }
        PyList_SET_ITEM(columns, i, c->sealed);
        c->sealed = fresh;
    }
    Py_ssize_t rows = self->rows;
    self->rows = 0;
    return Py_BuildValue("(nN)", rows, columns);
}

static Py_ssize_t Columns_length(ColumnsObject *self) { return self->rows; }

static PyMethodDef Columns_methods[] = {
    {"append", (PyCFunction)Columns_append, METH_O, "append(row: dict): one row, converted by column kind"},
    {"finish", (PyCFunction)Columns_finish, METH_NOARGS,
     "finish() -> (rows, [[(length, null_count, validity, values, data), ...] | None per column])"},
    {NULL},
};

static PyMemberDef Columns_members[] = {
    {"names", T_OBJECT, offsetof(ColumnsObject, names), READONLY, "the column names"},
    {NULL},
};

static PySequenceMethods Columns_as_sequence = {.sq_length = (lenfunc)Columns_length};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol.coordinator_topics._offsets.Columns",
    .tp_basicsize = sizeof(ColumnsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Columns_new,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_members = Columns_members,
    .tp_as_sequence = &Columns_as_sequence,
};

/* The layouts Decoder.columns fills: kprotocol.pipeline.tables.SCHEMAS' records and offsets_committed. */
enum { R_TOPIC, R_PARTITION, R_SEGMENT, R_BATCH_POSITION, R_PRODUCER_ID, R_OFFSET, R_TIMESTAMP, R_RECORD_TYPE,
       R_RECORD_TYPE_NAME, R_GROUP, R_KEY_JSON, R_VALUE_JSON, R_TOMBSTONE, R_CONTROL, R_PROBLEM, NRECORDS };
static const char *RECORDS[NRECORDS] = {
    "topic", "partition", "segment", "batch_position", "producer_id", "offset", "timestamp", "record_type",
    "record_type_name", "group", "key_json", "value_json", "tombstone", "control", "problem"};
static const int RECORDS_KINDS[NRECORDS] = {
    COL_SKIP, COL_SKIP, COL_SKIP, COL_I64, COL_I64, COL_I64, COL_I64, COL_I32, COL_STR, COL_STR, COL_STR, COL_STR,
    COL_BOOL, COL_STR, COL_STR};
enum { O_GROUP, O_TOPIC, O_PARTITION, O_OFFSET, O_LEADER_EPOCH, O_METADATA, O_COMMIT_TIMESTAMP, O_EXPIRE_TIMESTAMP,
       O_DELETED, O_TRANSACTIONAL, O_PRODUCER_ID, O_RECORD_OFFSET, O_RECORD_TIMESTAMP, O_SOURCE_PARTITION, NCOMMITS };
static const char *COMMITS[NCOMMITS] = {
    "group", "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp",
    "deleted", "transactional", "producer_id", "record_offset", "record_timestamp", "source_partition"};
static const int COMMITS_KINDS[NCOMMITS] = {
    COL_STR, COL_STR, COL_I32, COL_I64, COL_I32, COL_STR, COL_I64, COL_I64, COL_BOOL, COL_BOOL, COL_I64, COL_I64,
    COL_I64, COL_SKIP};
static PyObject *record_key[NRECORDS]; /* interned names of the rows handed to `derive` */

static ColumnsObject *layout(PyObject *o, const char **names, const int *kinds, int n, const char *table) {
    if (!PyObject_TypeCheck(o, &ColumnsType)) {
        PyErr_Format(PyExc_TypeError, "%s: a Columns builder expected", table);
        return NULL;
    }
    ColumnsObject *t = (ColumnsObject *)o;
    int same = t->ncols == n;
    for (int i = 0; same && i < n; i++) {
        same = t->cols[i].kind == kinds[i] &&
               PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(t->names, i), names[i]) == 0;
    }
    if (!same) {
        PyErr_Format(PyExc_ValueError, "the %s builder's columns are not the layout Decoder.columns fills", table);
        return NULL;
    }
    if (t->busy) {
        PyErr_Format(PyExc_RuntimeError, "the %s builder is being filled by another Decoder.columns call", table);
        return NULL;
    }
    return usable(t) < 0 ? NULL : t;
}

/* A captured scalar into a column (null when absent). */
static int col_capture(ColumnsObject *t, Column *c, const Capture *cap) {
    if (!cap->set || cap->isnull) return col_null(c);
    if (c->kind == COL_STR ? cap->kind != K_STRING : cap->kind >= K_UUID) {
        PyErr_SetString(PyExc_SystemError, "a captured field's kind is not its column's");
        return ERR;
    }
    if (c->kind == COL_STR) return col_str(t, c, (const char *)cap->p, cap->n);
    return c->kind == COL_I32 ? col_i32(c, cap->i) : col_i64(c, cap->i);
}

static PyObject *captured(const Capture *c) {
    if (!c->set || c->isnull) Py_RETURN_NONE;
    if (c->kind == K_STRING) return PyUnicode_DecodeUTF8((const char *)c->p, c->n, NULL);
    return PyLong_FromLongLong(c->i);
}

/* The last value of a string column as str. */
static PyObject *last_str(const Column *c) {
    const int32_t *at = (const int32_t *)c->values.buf;
    return PyUnicode_DecodeUTF8(c->data.buf + at[c->n - 1], at[c->n] - at[c->n - 1], NULL);
}

/* d[record_key[c]] = v, stealing v (NULL: an exception is set). */
static int set(PyObject *d, int c, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItem(d, record_key[c], v);
    Py_DECREF(v);
    return r;
}

/* The records row of a member-type record as a dict (as offsets_rows.record_rows builds it), for
 * derive(row, transactional). */
static int call_derive(PyObject *derive, PyObject *base, ColumnsObject *R, int64_t position, const Batch *bt,
                       const Rec *rec, int type, PyObject *name, const Capture *group, int tombstone) {
    int txn = (bt->attributes & 0x10) != 0;
    PyObject *row = PyDict_Copy(base);
    if (!row) return ERR;
    int bad = set(row, R_BATCH_POSITION, PyLong_FromLongLong(position)) < 0 ||
              set(row, R_PRODUCER_ID, txn ? PyLong_FromLongLong(bt->producer_id) : Py_NewRef(Py_None)) < 0 ||
              set(row, R_OFFSET, PyLong_FromLongLong(rec->offset)) < 0 ||
              set(row, R_TIMESTAMP, PyLong_FromLongLong(rec->timestamp)) < 0 ||
              set(row, R_RECORD_TYPE, PyLong_FromLong(type)) < 0 || set(row, R_RECORD_TYPE_NAME, Py_NewRef(name)) < 0 ||
              set(row, R_GROUP, captured(group)) < 0 || set(row, R_KEY_JSON, last_str(&R->cols[R_KEY_JSON])) < 0 ||
              set(row, R_VALUE_JSON, tombstone ? Py_NewRef(Py_None) : last_str(&R->cols[R_VALUE_JSON])) < 0 ||
              set(row, R_TOMBSTONE, PyBool_FromLong(tombstone)) < 0 || set(row, R_CONTROL, Py_NewRef(Py_None)) < 0 ||
              set(row, R_PROBLEM, Py_NewRef(Py_None)) < 0;
    PyObject *done = bad ? NULL : PyObject_CallFunctionObjArgs(derive, row, txn ? Py_True : Py_False, NULL);
    Py_DECREF(row);
    if (!done) return ERR;
    Py_DECREF(done);
    return 0;
}

/* The columns every records row starts with. */
static int record_head(Column *rc, int64_t position, const Batch *bt, const Rec *rec) {
    if (col_i64(&rc[R_BATCH_POSITION], position) < 0 ||
        ((bt->attributes & 0x10) ? col_i64(&rc[R_PRODUCER_ID], bt->producer_id) : col_null(&rc[R_PRODUCER_ID])) < 0 ||
        col_i64(&rc[R_OFFSET], rec->offset) < 0 || col_i64(&rc[R_TIMESTAMP], rec->timestamp) < 0)
        return ERR;
    return 0;
}

/* One record's rows, written into the builders: 0, FB (nothing written: for the fallback) or ERR. */
static int record_columns(DecoderObject *self, const Rec *rec, const Batch *bt, int64_t position, Ctx *ctx,
                          ColumnsObject *R, ColumnsObject *C, PyObject *base, PyObject *derive) {
    Column *rc = R->cols;
    if (bt->attributes & 0x20) {
        int commit = (int16_t)be(rec->key + 2, 2) == 1;
        if (record_head(rc, position, bt, rec) < 0 || col_null(&rc[R_RECORD_TYPE]) < 0 ||
            col_null(&rc[R_RECORD_TYPE_NAME]) < 0 || col_null(&rc[R_GROUP]) < 0 || col_null(&rc[R_KEY_JSON]) < 0 ||
            col_null(&rc[R_VALUE_JSON]) < 0 || col_bool(&rc[R_TOMBSTONE], 0) < 0 ||
            (commit ? col_str(R, &rc[R_CONTROL], "COMMIT", 6) : col_str(R, &rc[R_CONTROL], "ABORT", 5)) < 0 ||
            col_null(&rc[R_PROBLEM]) < 0)
            return ERR;
        R->rows++;
        return 0;
    }
    int type, version, r;
    PlanObject *vplan;
    Out *k = &rc[R_KEY_JSON].data, *v = &rc[R_VALUE_JSON].data;
    Py_ssize_t k0 = k->len, v0 = v->len;
    /* The key's and value's JSON straight into their columns' data; taken back if the record is not taken. */
    if ((r = plans_of(self, rec, ctx, &type, &version, &vplan)) < 0 || (r = emit_key_doc(self, rec, type, k, ctx)) < 0 ||
        (vplan && (r = emit_value_doc(self, rec, type, version, vplan, v, ctx)) < 0)) {
        k->len = k0;
        v->len = v0;
        return r;
    }
    PyObject *name = self->names[type];
    Py_ssize_t name_len;
    const char *name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_len);
    const Capture *cap = ctx->cap;
    if (!name_utf8 || col_str_end(R, &rc[R_KEY_JSON], k0) < 0 ||
        (vplan ? col_str_end(R, &rc[R_VALUE_JSON], v0) : col_null(&rc[R_VALUE_JSON])) < 0 ||
        record_head(rc, position, bt, rec) < 0 || col_i32(&rc[R_RECORD_TYPE], type) < 0 ||
        col_str(R, &rc[R_RECORD_TYPE_NAME], name_utf8, name_len) < 0 || col_capture(R, &rc[R_GROUP], &cap[0]) < 0 ||
        col_bool(&rc[R_TOMBSTONE], !vplan) < 0 || col_null(&rc[R_CONTROL]) < 0 || col_null(&rc[R_PROBLEM]) < 0)
        return ERR;
    R->rows++;
    if (type == 0 || type == 1) {
        Column *oc = C->cols;
        int tombstone = !vplan, txn = (bt->attributes & 0x10) != 0;
        Capture none = {0};
        if (col_capture(C, &oc[O_GROUP], &cap[0]) < 0 || col_capture(C, &oc[O_TOPIC], &cap[1]) < 0 ||
            col_capture(C, &oc[O_PARTITION], &cap[2]) < 0 ||
            col_capture(C, &oc[O_OFFSET], tombstone ? &none : &cap[3]) < 0 ||
            col_capture(C, &oc[O_LEADER_EPOCH], tombstone ? &none : &cap[4]) < 0 ||
            col_capture(C, &oc[O_METADATA], tombstone ? &none : &cap[5]) < 0 ||
            col_capture(C, &oc[O_COMMIT_TIMESTAMP], tombstone ? &none : &cap[6]) < 0 ||
            col_capture(C, &oc[O_EXPIRE_TIMESTAMP], tombstone ? &none : &cap[7]) < 0 ||
            col_bool(&oc[O_DELETED], tombstone) < 0 || col_bool(&oc[O_TRANSACTIONAL], txn) < 0 ||
            (txn ? col_i64(&oc[O_PRODUCER_ID], bt->producer_id) : col_null(&oc[O_PRODUCER_ID])) < 0 ||
            col_i64(&oc[O_RECORD_OFFSET], rec->offset) < 0 || col_i64(&oc[O_RECORD_TIMESTAMP], rec->timestamp) < 0)
            return ERR;
        C->rows++;
    } else if (self->member_types >> type & 1) {
        return call_derive(derive, base, R, position, bt, rec, type, name, &cap[0], !vplan);
    }
    return 0;
}

/* columns(buffer, pos, end, origin, records, commits, base, derive) -> (pos, stopped): the pipeline's
 * records and offsets_committed rows of the batches from `pos` (at `origin + pos` in the file) until
 * `end` or a batch for the Python reader, written into the two Columns builders (their topic,
 * partition, segment and source_partition columns are the split's, filled in Python). Records of a
 * member type also go to derive(row, transactional) as a records-row dict (a copy of `base` with the
 * record's columns); a record the plans do not take to fallback(offset, timestamp, key, value,
 * batch_position, producer_id), which adds its own rows. */
static PyObject *Decoder_columns(DecoderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t pos, end, origin;
    if (nargs != 8 || !PyDict_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "columns(buffer, pos, end, origin, records: Columns, commits: Columns, base: dict, derive)");
        return NULL;
    }
    if ((pos = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((end = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if ((origin = PyLong_AsSsize_t(args[3])) == -1 && PyErr_Occurred()) return NULL;
    ColumnsObject *R = layout(args[4], RECORDS, RECORDS_KINDS, NRECORDS, "records");
    ColumnsObject *C = R ? layout(args[5], COMMITS, COMMITS_KINDS, NCOMMITS, "offsets_committed") : NULL;
    if (!C) return NULL;
    if (R == C) {
        PyErr_SetString(PyExc_ValueError, "records and offsets_committed need builders of their own");
        return NULL;
    }
    PyObject *base = args[6], *derive = args[7];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos/end outside the buffer");
        return NULL;
    }
    const unsigned char *d = view.buf;
    Ctx ctx;
    ctx.hook = self->hook;
    memcpy(ctx.nested, self->nested, sizeof(ctx.nested));
    memcpy(ctx.latest, self->latest, sizeof(ctx.latest));
    int stopped = 0, status = 0;
    R->busy = C->busy = 1;
    while (pos < end) {
        Batch bt;
        int r = read_batch(self, d, pos, end, &bt);
        if (r == ERR) { status = ERR; break; }
        if (r == FB) { stopped = 1; break; }
        if ((bt.attributes & 0x20) && !plain_markers(self->recs, bt.count)) {
            Py_XDECREF(bt.inflated);
            stopped = 1;
            break;
        }
        int64_t position = (int64_t)origin + pos;
        PyObject *py_position = NULL, *producer = NULL; /* made for the fallback only */
        for (int32_t i = 0; i < bt.count; i++) {
            const Rec *rec = &self->recs[i];
            r = record_columns(self, rec, &bt, position, &ctx, R, C, base, derive);
            if (r == ERR) { status = ERR; break; }
            if (r == FB) {
                if (!py_position) {
                    py_position = PyLong_FromLongLong(position);
                    producer = (bt.attributes & 0x10) ? PyLong_FromLongLong(bt.producer_id) : Py_NewRef(Py_None);
                    if (!py_position || !producer) { status = ERR; break; }
                }
                PyObject *off = PyLong_FromLongLong(rec->offset), *ts = PyLong_FromLongLong(rec->timestamp);
                PyObject *key = rec_bytes(rec->key, rec->key_len), *value = rec_bytes(rec->value, rec->value_len);
                PyObject *done = off && ts && key && value ?
                    PyObject_CallFunctionObjArgs(self->fallback, off, ts, key, value, py_position, producer, NULL) : NULL;
                Py_XDECREF(off); Py_XDECREF(ts); Py_XDECREF(key); Py_XDECREF(value);
                if (!done) { status = ERR; break; }
                Py_DECREF(done);
            }
        }
        Py_XDECREF(py_position);
        Py_XDECREF(producer);
        Py_XDECREF(bt.inflated);
        if (status) break;
        pos += bt.size;
    }
    PyBuffer_Release(&view);
    R->busy = C->busy = 0;
    if (status) {  /* a row may be half written: the builders refuse further use */
        R->broken = C->broken = 1;
        return NULL;
    }
    return Py_BuildValue("(nO)", pos, stopped ? Py_True : Py_False);
}

/* payload(which, protocol, data) -> bytes | None: the `decoded<Field>` JSON of a classic member's
 * consumer-protocol payload (which 1: a subscription, 2: an assignment) of a "consumer" group using
 * `protocol` (its Streams userdata when "stream"), as kprotocol.group_payloads.attach writes it; None
 * when the Python decoder has to take it. */
static PyObject *Decoder_payload(DecoderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int which;
    if (nargs != 3 || !PyLong_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyBytes_Check(args[2]) ||
        ((which = (int)PyLong_AsLong(args[0])) != 1 && which != 2)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "payload(which: 1 | 2, protocol: str, data: bytes)");
        return NULL;
    }
    Py_ssize_t name_len;
    const char *name = PyUnicode_AsUTF8AndSize(args[1], &name_len);
    if (!name) return NULL;
    Ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    memcpy(ctx.nested, self->nested, sizeof(ctx.nested));
    memcpy(ctx.latest, self->latest, sizeof(ctx.latest));
    ctx.cap[CAP_PROTOCOL] = (Capture){1, 0, K_STRING, 0, (const unsigned char *)name, name_len};
    FieldPlan f;
    memset(&f, 0, sizeof(f));
    f.hook = which;
    f.hook_key = self->empty;
    Scalar v = {0, 0, (const unsigned char *)PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2])};
    Out *o = &self->scratch;
    o->len = 0;
    int r = emit_nested(&ctx, &f, &v, o);
    if (r == ERR) return NULL;
    if (r == FB) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(o->buf, o->len);
}

static PyMethodDef Decoder_methods[] = {
    {"lines", (PyCFunction)(void (*)(void))Decoder_lines, METH_FASTCALL,
     "lines(buffer, pos, end, head, limit) -> (bytes, pos, written, stopped)"},
    {"payload", (PyCFunction)(void (*)(void))Decoder_payload, METH_FASTCALL,
     "payload(which, protocol, data) -> bytes | None: a consumer-protocol payload's decoded<Field> JSON"},
    {"columns", (PyCFunction)(void (*)(void))Decoder_columns, METH_FASTCALL,
     "columns(buffer, pos, end, origin, records, commits, base, derive) -> (pos, stopped)"},
    {NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol.coordinator_topics._offsets.Decoder",
    .tp_basicsize = sizeof(DecoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Decoder_new,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_traverse = (traverseproc)Decoder_traverse,
    .tp_methods = Decoder_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kprotocol.coordinator_topics._offsets",
    "Compiled path from __consumer_offsets segments to JSON lines.", -1, NULL,
};

PyMODINIT_FUNC PyInit__offsets(void) {
    crc_init();
    for (int c = 0; c < NRECORDS; c++) {
        if (!(record_key[c] = PyUnicode_InternFromString(RECORDS[c]))) return NULL;
    }
    if (PyType_Ready(&PlanType) < 0 || PyType_Ready(&DecoderType) < 0 || PyType_Ready(&BufferType) < 0 ||
        PyType_Ready(&ColumnsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0 ||
        PyModule_AddObjectRef(m, "Columns", (PyObject *)&ColumnsType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
