<?php
// PHP's trap, pinned: query() and execute() run a statement twice when it is first fetched, so a
// claim of one job leases two and a settle read through them answers 0; tinyq_once() (once.php)
// and querySingle() run it once.
//   php -d sqlite3.extension_dir=DIR query_trap.php TINYQ_SO DB
require __DIR__ . '/once.php';

function state(SQLite3 $db, string $id): string
{
    return $db->querySingle("SELECT tq_get('$id') ->> 'state'");
}

// What a user would see of each call, as "what: expected, got" for every one that differs.
function trap(SQLite3 $db): array
{
    foreach (['unsafe:a', 'unsafe:b', 'safe:a', 'safe:b'] as $id) {
        tinyq_once($db, 'SELECT tq_add(?1, ?2, ?3)', [strtok($id, ':'), '{}', json_encode(['id' => $id])]);
    }
    $seen = [];

    $claimed = $db->query("SELECT id FROM tq_claim('unsafe', 'php', 1)")->fetchArray(SQLITE3_NUM);
    $seen['query() claim of 1 returns'] = ['unsafe:b', $claimed[0]];
    $seen['the job it threw away'] = ['running', state($db, 'unsafe:a')];
    $settle = $db->prepare('SELECT tq_settle(?1, 1, ?2)');
    $settle->bindValue(1, 'unsafe:b');
    $settle->bindValue(2, 'done');
    $seen['execute() settle answers'] = [0, $settle->execute()->fetchArray(SQLITE3_NUM)[0]];
    $seen['yet the job is'] = ['done', state($db, 'unsafe:b')];

    $claimed = tinyq_once($db, 'SELECT id FROM tq_claim(?1, ?2, ?3)', ['safe', 'php', 1]);
    $seen['tinyq_once() claim of 1 returns'] = [[['safe:a']], $claimed];
    $seen['and leaves the next job'] = ['waiting', state($db, 'safe:b')];
    $seen['querySingle() settle answers'] = [1, $db->querySingle("SELECT tq_settle('safe:a', 1, 'done')")];

    return array_map(fn ($what) => "$what: expected " . json_encode($seen[$what][0]) . ', got ' . json_encode($seen[$what][1]),
        array_keys(array_filter($seen, fn ($pair) => $pair[0] !== $pair[1])));
}

[, $so, $path] = $argv;
try {
    $wrong = trap(tinyq_open($path, $so));
} catch (Throwable $e) {
    $wrong = [get_class($e) . ': ' . $e->getMessage()];
}
if ($wrong) {
    echo 'php-query-trap: failed: ' . implode('; ', $wrong) . "\n";
    exit(1);
}
echo "php-query-trap: passed (query() leased 2 jobs for a claim of 1 and execute() settled 0;"
    . " tinyq_once() leased 1, querySingle() settled 1)\n";
