/* The smallest FastCGI responder over the same libfcgi and MariaDB Connector/C as the
 * workers: N threads, each with its own connection, and a fixed JSON answer. scripts/bench
 * builds and runs it as two rows, the limits the real routes are compared with (no routing,
 * no token, no logging, no metrics):
 *   select  (`raw`)        each request one `SELECT 1`;
 *   insert  (`rawingest`)  each request one prepared `INSERT` of a unique id and the request
 *                          body (the bench posts ~1 KB) into bench_rawingest, autocommit:
 *                          one durable commit, the smallest idempotent webhook.
 * Usage: raw-fcgi select|insert SOCKET THREADS DB_SOCKET DB_USER PASSWORD_FILE */
#include <fcgiapp.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int listen_fd, inserting;
static const char *db_socket, *db_user;
static char db_password[256];

/* One INSERT of (id, body), prepared once per thread; the id is unique per process start,
 * thread and request. */
static int insert(MYSQL_STMT *stmt, FCGX_Request *request, long thread, unsigned long n) {
    static char body_buffer[256][4096];
    char *body = body_buffer[thread];
    int length = FCGX_GetStr(body, sizeof body_buffer[0], request->in);
    if (length < 0) length = 0;
    char id[64];
    unsigned long id_length = (unsigned long)snprintf(id, sizeof id, "%ld-%d-%ld-%lu", (long)getpid(), (int)time(NULL), thread, n);
    unsigned long body_length = (unsigned long)length;
    MYSQL_BIND bind[2];
    memset(bind, 0, sizeof bind);
    bind[0].buffer_type = MYSQL_TYPE_STRING;
    bind[0].buffer = id;
    bind[0].length = &id_length;
    bind[1].buffer_type = MYSQL_TYPE_STRING;
    bind[1].buffer = body;
    bind[1].length = &body_length;
    return mysql_stmt_bind_param(stmt, bind) == 0 && mysql_stmt_execute(stmt) == 0;
}

static void *serve(void *arg) {
    long thread = (long)arg;
    MYSQL *db = mysql_init(NULL);
    if (!mysql_real_connect(db, NULL, db_user, db_password, "billing", 0, db_socket, 0)) {
        fprintf(stderr, "raw-fcgi: %s\n", mysql_error(db));
        exit(1);
    }
    MYSQL_STMT *stmt = NULL;
    const char *sql = "INSERT INTO bench_rawingest (id, payload) VALUES (?, ?)";
    if (inserting && (!(stmt = mysql_stmt_init(db)) || mysql_stmt_prepare(stmt, sql, strlen(sql)) != 0)) {
        fprintf(stderr, "raw-fcgi: %s\n", stmt ? mysql_stmt_error(stmt) : mysql_error(db));
        exit(1);
    }
    FCGX_Request request;
    FCGX_InitRequest(&request, listen_fd, 0);
    unsigned long n = 0;
    while (FCGX_Accept_r(&request) >= 0) {
        int ok;
        if (inserting) {
            ok = insert(stmt, &request, thread, n++);
        } else {
            ok = mysql_query(db, "SELECT 1") == 0;
            MYSQL_RES *result = mysql_store_result(db);
            if (result) mysql_free_result(result);
        }
        FCGX_FPrintF(request.out, "Status: %s\r\nContent-Type: application/json\r\n\r\n{\"ok\":%s}\n",
                     ok ? "200 OK" : "503 Service Unavailable", ok ? "true" : "false");
        FCGX_Finish_r(&request);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[1], "select") != 0 && strcmp(argv[1], "insert") != 0)) {
        fprintf(stderr, "usage: raw-fcgi select|insert SOCKET THREADS DB_SOCKET DB_USER PASSWORD_FILE\n");
        return 64;
    }
    inserting = strcmp(argv[1], "insert") == 0;
    argv++;
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
    for (long i = 0; i < threads; i++) pthread_create(&ids[i], NULL, serve, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
