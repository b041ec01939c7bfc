#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt and curl_easy_getinfo are variadic; Swift cannot call them. One typed
   wrapper per argument type used. */
static inline CURLcode ccurl_setopt_long(CURL *c, CURLoption o, long v) { return curl_easy_setopt(c, o, v); }
static inline CURLcode ccurl_setopt_string(CURL *c, CURLoption o, const char *v) { return curl_easy_setopt(c, o, v); }
static inline CURLcode ccurl_setopt_pointer(CURL *c, CURLoption o, void *v) { return curl_easy_setopt(c, o, v); }
static inline CURLcode ccurl_setopt_slist(CURL *c, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(c, o, v); }
typedef size_t (*ccurl_write_callback)(char *data, size_t size, size_t count, void *context);
static inline CURLcode ccurl_setopt_write_function(CURL *c, CURLoption o, ccurl_write_callback f) { return curl_easy_setopt(c, o, f); }
static inline CURLcode ccurl_getinfo_long(CURL *c, CURLINFO i, long *v) { return curl_easy_getinfo(c, i, v); }
#endif
