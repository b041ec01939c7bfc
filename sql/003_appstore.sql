-- 003_appstore: who owns each App Store subscription (binding by originalTransactionId)
-- and the audit of every binding decision.

CREATE TABLE billing_apple_bindings (
  original_transaction_id VARCHAR(191) NOT NULL
    COMMENT 'App Store originalTransactionId: identifies the subscription from first purchase to end',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The one user owning it (billing_users.id); App Store events of this subscription fold into this user',
  source VARCHAR(24) NOT NULL
    COMMENT 'How it was bound: transaction (the app posted a signed transaction) or app_account_token (a notification named a known user)',
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox, from the transaction that created the binding',
  bound_at DATETIME(3) NOT NULL
    COMMENT 'When the current owner got it (UTC)',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When the subscription was first bound to anyone (UTC)',
  moves INT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'How many times an explicit restore moved it to another user (binding.policy restore_moves)',
  PRIMARY KEY (original_transaction_id),
  KEY billing_apple_bindings_user (user_id),
  CONSTRAINT billing_apple_bindings_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_apple_bindings_source_valid CHECK (source IN ('transaction', 'app_account_token')),
  CONSTRAINT billing_apple_bindings_environment_valid CHECK (environment IN ('production', 'sandbox'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Binding of App Store subscriptions to users: at most one user per originalTransactionId (primary key)';

CREATE TABLE billing_binding_audit (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Audit sequence',
  original_transaction_id VARCHAR(191) NOT NULL
    COMMENT 'The subscription concerned',
  action VARCHAR(16) NOT NULL
    COMMENT 'bound (first owner), moved (restore moved it: restore_moves), denied (another user owns it: 409), unbound (user deleted)',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The user who asked (the caller) or, for bound via app_account_token, the named user',
  previous_user_id VARCHAR(128) NULL
    COMMENT 'The owner before the request, when another user owned it',
  policy VARCHAR(16) NOT NULL
    COMMENT 'binding.policy in force: deny or restore_moves',
  restore TINYINT(1) NOT NULL DEFAULT 0
    COMMENT '1 when the app marked the post as an explicit restore',
  transaction_id VARCHAR(191) NULL
    COMMENT 'The posted transactionId (or the notification''s transaction) behind the decision',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When it was decided (UTC)',
  PRIMARY KEY (id),
  KEY billing_binding_audit_subscription (original_transaction_id, created_at),
  KEY billing_binding_audit_user (user_id, created_at),
  CONSTRAINT billing_binding_audit_action_valid CHECK (action IN ('bound', 'moved', 'denied', 'unbound')),
  CONSTRAINT billing_binding_audit_policy_valid CHECK (policy IN ('deny', 'restore_moves')),
  CONSTRAINT billing_binding_audit_restore_bool CHECK (restore IN (0, 1))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Every App Store binding decision (bound, moved, denied, unbound), append-only';
