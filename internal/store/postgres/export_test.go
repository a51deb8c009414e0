package postgres

// DialectSQL is a shared query as this driver runs it.
var DialectSQL = dialect.SQL
