<?php
// PHP's SQLite3::query() and SQLite3Stmt::execute() step a statement, reset it, and step it again
// at the first fetch: a tq_claim or tq_settle read through them runs twice (query_trap.php shows it).
// These open tinyq and run a statement exactly once.

function tinyq_open(string $path, string $so): SQLite3
{
    // loadExtension() takes a name inside sqlite3.extension_dir: php -d sqlite3.extension_dir=DIR, absolute.
    $db = new SQLite3($path);
    $db->enableExceptions(true);
    $db->loadExtension(basename($so));
    return $db;
}

// The rows of $sql with $args bound to ?1, ?2 ..., stepped once: the statement fills a temp table
// (it returns no rows, so execute() has nothing to step again) and query() reads that table.
function tinyq_once(SQLite3 $db, string $sql, array $args = []): array
{
    $db->exec('DROP TABLE IF EXISTS temp.tinyq_once');
    $stmt = $db->prepare("CREATE TEMP TABLE tinyq_once AS $sql");
    foreach ($args as $i => $value) {
        $stmt->bindValue($i + 1, $value);
    }
    $stmt->execute();
    $stmt->close();
    $rows = [];
    $result = $db->query('SELECT * FROM temp.tinyq_once');
    while (($row = $result->fetchArray(SQLITE3_NUM)) !== false) {
        $rows[] = $row;
    }
    return $rows;
}
