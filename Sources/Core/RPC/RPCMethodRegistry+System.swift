import Glibc

extension RPCMethodRegistry {
    /// `system.health` and `system.listMethods`: what the CLI and monitoring need from a
    /// daemon that has no other feature yet.
    public mutating func registerSystemMethods() {
        register("system.health",
                 summary: "Daemon status: pid, uptime, version, server time and database probe",
                 params: "none") { request, context in
            try request.params.expectOnly()
            let uptimeMilliseconds = monotonicMilliseconds() - context.server.startedAtMonotonicMilliseconds
            return [
                "status": "ok",
                "pid": .int(Int64(getpid())),
                "uptimeSeconds": .int(uptimeMilliseconds / 1000),
                "version": .string(context.server.version),
                "startedAt": .string(context.server.startedAt.iso8601),
                "serverTime": .string(context.clock.now().iso8601),
                "database": context.databaseStatus(),
            ]
        }
        register("system.listMethods", summary: "Names, one-line descriptions and params of all methods",
                 params: "none") { request, context in
            try request.params.expectOnly()
            return .array(context.registry.methods.map { method in
                ["name": .string(method.name), "summary": .string(method.summary), "params": .string(method.paramsHelp)]
            })
        }
    }
}
