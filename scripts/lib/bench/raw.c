/* The smallest FastCGI responder over the same libfcgi and MariaDB Connector/C as the
 * workers: N threads, each with its own connection, each request one `SELECT 1` and a
 * fixed JSON answer. scripts/bench builds and runs it as the `raw` row: the limit the real
 * routes are compared with (no routing, no token, no logging, no metrics).
 * Usage: raw-fcgi SOCKET THREADS DB_SOCKET DB_USER PASSWORD_FILE */
#include <fcgiapp.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int listen_fd;
static const char *db_socket, *db_user;
static char db_password[256];

static void *serve(void *unused) {
    (void)unused;
    MYSQL *db = mysql_init(NULL);
    if (!mysql_real_connect(db, NULL, db_user, db_password, "billing", 0, db_socket, 0)) {
        fprintf(stderr, "raw-fcgi: %s\n", mysql_error(db));
        exit(1);
    }
    FCGX_Request request;
    FCGX_InitRequest(&request, listen_fd, 0);
    while (FCGX_Accept_r(&request) >= 0) {
        int ok = mysql_query(db, "SELECT 1") == 0;
        MYSQL_RES *result = mysql_store_result(db);
        if (result) mysql_free_result(result);
        FCGX_FPrintF(request.out, "Status: %s\r\nContent-Type: application/json\r\n\r\n{\"ok\":%s}\n",
                     ok ? "200 OK" : "503 Service Unavailable", ok ? "true" : "false");
        FCGX_Finish_r(&request);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: raw-fcgi SOCKET THREADS DB_SOCKET DB_USER PASSWORD_FILE\n");
        return 64;
    }
    int threads = atoi(argv[2]);
    db_socket = argv[3];
    db_user = argv[4];
    FILE *f = fopen(argv[5], "r");
    if (!f || !fgets(db_password, sizeof db_password, f)) { perror("raw-fcgi: password file"); return 1; }
    fclose(f);
    db_password[strcspn(db_password, "\n")] = 0;
    FCGX_Init();
    /* FCGX_Init catches SIGTERM to end the accept loop after the next request; with every
     * thread blocked in accept() that never comes, and scripts/bench's kill left one
     * responder (and its connections) behind per run. */
    signal(SIGTERM, SIG_DFL);
    mysql_library_init(0, NULL, NULL);
    unlink(argv[1]);
    listen_fd = FCGX_OpenSocket(argv[1], 1024);
    if (listen_fd < 0 || chmod(argv[1], 0660) != 0) { perror("raw-fcgi: socket"); return 1; }
    pthread_t ids[256];
    if (threads < 1 || threads > 256) return 64;
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, serve, NULL);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
