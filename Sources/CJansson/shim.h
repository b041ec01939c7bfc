#ifndef CJANSSON_SHIM_H
#define CJANSSON_SHIM_H
#include <jansson.h>

/* json_typeof is a macro reading the struct field; Swift cannot import it. */
static inline json_type cjansson_typeof(const json_t *j) { return json_typeof(j); }
/* json_decref/json_incref are static inline with atomics in the header; wrap for clarity. */
static inline void cjansson_decref(json_t *j) { json_decref(j); }
static inline json_t *cjansson_incref(json_t *j) { return json_incref(j); }
/* json_boolean is a macro choosing json_true()/json_false(). */
static inline json_t *cjansson_boolean(int v) { return v ? json_true() : json_false(); }
#endif
