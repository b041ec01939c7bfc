import Glibc

/// What the `system.*` methods need of their context: the connection's own state.
protocol SystemRPCContext: RPCContextProtocol {
    /// `{status: ok|down}` from a probe of the connection's database; quick, never throws.
    var databaseStatus: () -> JSON { get }
}

extension RPCMethodRegistry where Context: SystemRPCContext {
    /// `system.health` and `system.listMethods`: what the CLI and monitoring need from a
    /// daemon that has no other feature yet. `metricsDirectory`: where the FastCGI workers
    /// publish their metrics snapshots (nil: none listed).
    mutating func registerSystemMethods(server: RPCServerInfo = RPCServerInfo(), metricsDirectory: MetricsDirectory? = nil) {
        register(
            "system.health",
            summary:
                "Daemon status: pid, uptime, version, server time, database probe and the FastCGI workers (pid, uptime, requests served, busy threads)",
            params: "none"
        ) { request, context in
            try request.params.expectOnly()
            let uptimeMilliseconds = monotonicMilliseconds() - server.startedAtMonotonicMilliseconds
            return [
                "status": "ok",
                "pid": .int(Int64(getpid())),
                "uptimeSeconds": .int(uptimeMilliseconds / 1000),
                "version": .string(server.version),
                "startedAt": .string(server.startedAt.iso8601),
                "serverTime": .string(context.clock.now().iso8601),
                "database": context.databaseStatus(),
                "workers": .array(
                    (metricsDirectory?.readAll(now: context.clock.now()) ?? []).sorted { $0.worker < $1.worker }.map {
                        $0.summary(now: context.clock.now())
                    }),
            ]
        }
        register(
            "system.listMethods", summary: "Names, one-line descriptions and params of all methods",
            params: "none"
        ) { request, context in
            try request.params.expectOnly()
            return .array(
                context.registry.methods.map { method in
                    var types = JSONObject()
                    for (name, type) in RPCParamType.parse(method.paramsHelp) { types[name] = .string(type.description) }
                    return [
                        "name": .string(method.name), "summary": .string(method.summary), "params": .string(method.paramsHelp),
                        "paramTypes": .object(types),
                    ]
                })
        }
    }
}
