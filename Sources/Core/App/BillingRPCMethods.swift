/// The method table of `billing-rpc`: every feature's JSON-RPC methods, in one place, here
/// in the composition root. Each feature registers its own in `<Feature>RPCMethods.swift`,
/// asking of the context only what it uses.
enum BillingRPCMethods {
    static func makeRegistry(
        services: BillingServices,
        replayers: QuarantineReplayers? = nil
    ) -> RPCMethodRegistry<AdminRPCContext> {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.registerSystemMethods()  // system.health, system.listMethods
        registry.registerAccessMethods()  // access.get
        registry.registerUserMethods()  // users.import, users.delete
        registry.registerGrantMethods()  // grants.create, grants.revoke, grants.list
        registry.registerGrandfatherMethods()  // grandfather.applyCohort, .applyUsers, .revoke, .audit
        registry.registerEventMethods(replayers: replayers ?? quarantineReplayers(services: services))  // events.*
        registry.registerFlagMethods()  // flags.get, flags.set
        registry.registerPlanMethods()  // plans.list, plans.publish
        registry.registerOfferingMethods()  // offerings.list, offerings.publish
        registry.registerStatsMethods()  // stats.subscriptions, stats.purgePaywallEvents
        registry.registerReconcileMethods()  // subscriptions.reconcile, subscriptions.reconcileStatus
        return registry
    }

    /// How `events.retryQuarantined` re-runs each provider's quarantined deliveries: App Store
    /// notifications are verified again with the current trust settings. The RevenueCat
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
        return replayers
    }
}
