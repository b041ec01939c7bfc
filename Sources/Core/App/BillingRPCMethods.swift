/// The method table of `billing-rpc`: every feature's JSON-RPC methods, in one place, here
/// in the composition root. Each feature registers its own in `<Feature>RPCMethods.swift`,
/// handed here what it needs of the process's services; the context carries only the
/// connection's state.
enum BillingRPCMethods {
    static func makeRegistry(
        services: BillingServices, server: RPCServerInfo = RPCServerInfo(),
        replayers: QuarantineReplayers? = nil
    ) -> RPCMethodRegistry<AdminRPCContext> {
        let configuration = services.configuration
        let idPattern = services.idPattern
        var registry = RPCMethodRegistry<AdminRPCContext>()
        // system.health, system.listMethods
        registry.registerSystemMethods(server: server, metricsDirectory: MetricsDirectory.of(configuration))
        // access.get
        registry.registerAccessMethods(
            idPattern: idPattern, catalog: services.catalog, plans: services.plans, flags: services.flags,
            overlayDetails: { userId, now, db in
                (try GrantStore.list(userId: userId, on: db).map { $0.json(at: now) }, try Grandfather.memberships(userId: userId, now: now, on: db))
            })
        // users.import, users.delete
        registry.registerUserMethods(
            idPattern: idPattern, bindingPolicy: configuration.binding.policy, liveChannels: LivePublisherSocket(configuration.live))
        // grants.create, grants.revoke, grants.list
        registry.registerGrantMethods(idPattern: idPattern)
        // grandfather.applyCohort, .applyUsers, .revoke, .audit
        registry.registerGrandfatherMethods(idPattern: idPattern)
        // events.*
        registry.registerEventMethods(idPattern: idPattern, replayers: replayers ?? quarantineReplayers(services: services))
        // flags.get, flags.set
        registry.registerFlagMethods()
        // plans.list, plans.publish
        registry.registerPlanMethods(plans: services.plans)
        // offerings.list, offerings.publish
        registry.registerOfferingMethods(offerings: services.offerings)
        // stats.subscriptions, stats.purgePaywallEvents
        registry.registerStatsMethods(catalog: services.catalog, reportingCurrency: configuration.reporting.currency)
        // subscriptions.reconcile, subscriptions.reconcileStatus
        registry.registerReconcileMethods(idPattern: idPattern, reconcile: services.reconcile)
        // webhooks.list, webhooks.deliveries, webhooks.replay
        registry.registerWebhookMethods(endpoints: configuration.webhooks.endpoints)
        // google.purchases.get
        registry.registerGooglePlayMethods(api: services.googlePlay)
        return registry
    }

    /// How `events.retryQuarantined` re-runs each provider's quarantined deliveries: App Store
    /// notifications are verified again with the current trust settings; Play pushes (their
    /// OIDC token verified on arrival) are checked against the current `google.packageName`
    /// and read from Play like a fresh push. The RevenueCat
    /// route quarantines nothing it could re-verify (its only check is the shared secret,
    /// which a stored body cannot prove), so it registers none.
    static func quarantineReplayers(services: BillingServices) -> QuarantineReplayers {
        var replayers = QuarantineReplayers()
        let verifier = services.appleVerifier
        let catalog = services.configuration.products
        let idPattern = services.idPattern
        let policy = services.configuration.binding.policy
        replayers.register(provider: EventProvider.appleNotification.rawValue) { delivery, now, db in
            try AppleQuarantineReplay.replay(
                delivery, verifier: verifier, catalog: catalog, idPattern: idPattern, policy: policy,
                now: now, on: db)
        }
        let play = services.googlePlayIngestion
        let logger = services.logger
        replayers.register(provider: EventProvider.googlePlay.rawValue) { delivery, now, db in
            try GooglePlayQuarantineReplay.replay(delivery, ingestion: play, logger: logger, now: now, on: db)
        }
        return replayers
    }
}
