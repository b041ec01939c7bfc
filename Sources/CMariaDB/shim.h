#ifndef CMARIADB_SHIM_H
#define CMARIADB_SHIM_H
#include <mysql.h>
#include <errmsg.h>

/* mysql_library_init is a macro over mysql_server_init; Swift cannot import macros. */
static inline int cmariadb_library_init(void) { return mysql_server_init(0, 0, 0); }
#endif
