#ifndef CMARIADB_SHIM_H
#define CMARIADB_SHIM_H
#include <mysql.h>
#include <errmsg.h>

/* mysql_library_init is a macro over mysql_server_init; Swift cannot import macros. */
static inline int cmariadb_library_init(void) { return mysql_server_init(0, 0, 0); }

/* The server status flags of the last OK or EOF packet (SERVER_STATUS_IN_TRANS, ...).
   mariadb_get_infov is variadic; Swift cannot call it directly. */
static inline unsigned int cmariadb_server_status(MYSQL *mysql) {
    unsigned int status = 0;
    mariadb_get_infov(mysql, MARIADB_CONNECTION_SERVER_STATUS, &status);
    return status;
}
#endif
