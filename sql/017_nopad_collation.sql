-- 017_nopad_collation (SPEC §19): ids compare byte for byte in SQL too. utf8mb4_bin is a
-- PAD SPACE collation: 'u1' = 'u1 ' is true, so a token whose sub is "<victim> " would read
-- the victim's rows. Every utf8mb4_bin column (ids, idempotency keys, states, payloads)
-- becomes utf8mb4_nopad_bin, and so does every table's default and the database's: one
-- ALTER TABLE per table, type, nullability, default and comment kept as they are. ascii_bin
-- columns (hashes, currencies) hold no trailing spaces by their CHECK constraints and stay.
-- MariaDB changes no column a foreign key uses, even with foreign_key_checks off: the
-- foreign keys are dropped first and added back, exactly as they were, at the end.
CREATE PROCEDURE billing_017_run(IN statements_query LONGTEXT)
BEGIN
  -- Runs each `statement` of the temporary table billing_017_statements, in order.
  DECLARE done INT DEFAULT 0;
  DECLARE statement_text LONGTEXT;
  DECLARE each_statement CURSOR FOR SELECT statement FROM billing_017_statements ORDER BY seq;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  DROP TEMPORARY TABLE IF EXISTS billing_017_statements;
  SET @billing_017_query = CONCAT('CREATE TEMPORARY TABLE billing_017_statements ENGINE=InnoDB AS ', statements_query);
  PREPARE make_statements FROM @billing_017_query;
  EXECUTE make_statements;
  DEALLOCATE PREPARE make_statements;
  OPEN each_statement;
  each_one: LOOP
    FETCH each_statement INTO statement_text;
    IF done THEN LEAVE each_one; END IF;
    SET @billing_017_statement = statement_text;
    PREPARE one_statement FROM @billing_017_statement;
    EXECUTE one_statement;
    DEALLOCATE PREPARE one_statement;
  END LOOP;
  CLOSE each_statement;
  DROP TEMPORARY TABLE billing_017_statements;
END;

CREATE PROCEDURE billing_017_nopad_collation()
BEGIN
  SET SESSION group_concat_max_len = 1048576;
  -- The foreign keys as they are now, to add back at the end.
  DROP TEMPORARY TABLE IF EXISTS billing_017_foreign_keys;
  CREATE TEMPORARY TABLE billing_017_foreign_keys ENGINE=InnoDB AS
    SELECT r.TABLE_NAME AS table_name, r.CONSTRAINT_NAME AS constraint_name,
           CONCAT('ALTER TABLE `', r.TABLE_NAME, '` ADD CONSTRAINT `', r.CONSTRAINT_NAME, '` FOREIGN KEY (',
                  GROUP_CONCAT(CONCAT('`', k.COLUMN_NAME, '`') ORDER BY k.ORDINAL_POSITION SEPARATOR ', '),
                  ') REFERENCES `', r.REFERENCED_TABLE_NAME, '` (',
                  GROUP_CONCAT(CONCAT('`', k.REFERENCED_COLUMN_NAME, '`') ORDER BY k.ORDINAL_POSITION SEPARATOR ', '),
                  ') ON DELETE ', r.DELETE_RULE, ' ON UPDATE ', r.UPDATE_RULE) AS add_statement
    FROM information_schema.REFERENTIAL_CONSTRAINTS r
    JOIN information_schema.KEY_COLUMN_USAGE k
      ON k.CONSTRAINT_SCHEMA = r.CONSTRAINT_SCHEMA AND k.TABLE_NAME = r.TABLE_NAME AND k.CONSTRAINT_NAME = r.CONSTRAINT_NAME
    WHERE r.CONSTRAINT_SCHEMA = DATABASE()
    GROUP BY r.TABLE_NAME, r.CONSTRAINT_NAME, r.REFERENCED_TABLE_NAME, r.DELETE_RULE, r.UPDATE_RULE;
  CALL billing_017_run(
    'SELECT ROW_NUMBER() OVER (ORDER BY table_name, constraint_name) AS seq,
            CONCAT(''ALTER TABLE `'', table_name, ''` DROP FOREIGN KEY `'', constraint_name, ''`'') AS statement
     FROM billing_017_foreign_keys');
  CALL billing_017_run(CONCAT(
    'SELECT ROW_NUMBER() OVER (ORDER BY c.TABLE_NAME) AS seq,
            CONCAT(''ALTER TABLE `'', c.TABLE_NAME, ''` '',
                   GROUP_CONCAT(CONCAT(''MODIFY `'', c.COLUMN_NAME, ''` '', c.COLUMN_TYPE,
                                       '' CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin'',
                                       IF(c.IS_NULLABLE = ''NO'', '' NOT NULL'', '' NULL''),
                                       IF(c.COLUMN_DEFAULT IS NULL, '''', CONCAT('' DEFAULT '', c.COLUMN_DEFAULT)),
                                       '' COMMENT '', QUOTE(c.COLUMN_COMMENT))
                                ORDER BY c.ORDINAL_POSITION SEPARATOR '', ''),
                   '', DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin'') AS statement
     FROM information_schema.COLUMNS c
     JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
     WHERE c.TABLE_SCHEMA = ', QUOTE(DATABASE()), ' AND t.TABLE_TYPE = ''BASE TABLE'' AND c.COLLATION_NAME = ''utf8mb4_bin''
     GROUP BY c.TABLE_NAME'));
  CALL billing_017_run(
    'SELECT ROW_NUMBER() OVER (ORDER BY table_name, constraint_name) AS seq, add_statement AS statement
     FROM billing_017_foreign_keys');
  DROP TEMPORARY TABLE billing_017_foreign_keys;
  SET @billing_017_statement = CONCAT('ALTER DATABASE `', DATABASE(), '` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin');
  PREPARE alter_database FROM @billing_017_statement;
  EXECUTE alter_database;
  DEALLOCATE PREPARE alter_database;
END;

CALL billing_017_nopad_collation();
DROP PROCEDURE billing_017_nopad_collation;
DROP PROCEDURE billing_017_run;
