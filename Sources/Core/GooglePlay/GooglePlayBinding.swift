/// Who owns a Google Play purchase token when the app posts it (SPEC §5 "Binding", §18): the
/// App Store post's policy over `billing_google_purchases.user_id`, each decision audited in
/// `billing_binding_audit` under the token's `gp:` id.
///
/// - not yet bound: the post's record binds it (`GooglePlayIngestion`, audited `bound`);
/// - bound to the caller: nothing to do;
/// - bound to another user: 409 `purchase_bound_elsewhere` under `deny`, or, under
///   `restore_moves` with `restore: true`, moved to the caller — the token's Play events change
///   owner and both users are re-folded in the same transaction.
///
/// A purchase whose `obfuscatedExternalAccountId` names an account never reaches here for
/// another one (403 `account_mismatch`): what the app stamped on the purchase is its owner.
/// Lock order as everywhere: the token's row, then the users' access rows in id order.
enum GooglePlayBinding {
    enum Decision: Sendable, Equatable {
        case unbound
        case alreadyOwned
        case moved(from: String)
        case denied(owner: String)
    }

    static func claim(
        token: String, userId: String, restore: Bool, policy: BillingConfiguration.Binding.Policy,
        now: Timestamp, on db: DatabaseConnection
    ) throws -> Decision {
        let id = GooglePlayEvent.subscriptionId(token: token)
        return try db.transaction(retries: 3, isolation: .readCommitted) { db -> Decision in
            let row = try db.queryOne("SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(id) FOR UPDATE")
            guard let owner = try row?.optionalString("user_id") else { return .unbound }
            if owner == userId { return .alreadyOwned }
            guard policy == .restoreMoves, restore else {
                try BindingAudit.record(
                    .denied, subscriptionId: id, userId: userId, previousUserId: owner, policy: policy, restore: restore, now: now,
                    on: db)
                return .denied(owner: owner)
            }
            try db.execute("UPDATE billing_google_purchases SET user_id = \(userId) WHERE subscription_id = \(id)")
            try BindingAudit.record(
                .moved, subscriptionId: id, userId: userId, previousUserId: owner, policy: policy, restore: true, now: now, on: db)
            try UserLock.lockAll([owner, userId], now: now, on: db)
            try EventInbox.moveSubject(
                subscriptionId: id, providers: GooglePlayIngestion.providers, from: owner, to: userId, now: now, on: db)
            for user in [owner, userId].sorted() { _ = try AccessProjector.refold(userId: user, now: now, on: db) }
            return .moved(from: owner)
        }
    }
}

extension GooglePlayBinding.Decision {
    /// The post's `purchase.binding` (`unbound` is bound by the record: `bound`).
    var label: String {
        switch self {
        case .unbound: return "bound"
        case .alreadyOwned: return "already_owned"
        case .moved: return "moved"
        case .denied: return "denied"
        }
    }
}
