<?php
// The driver scenario (tests/drivers/scenario.json) through PHP's SQLite3, each step run once:
//   php -d sqlite3.extension_dir=DIR runner.php TINYQ_SO SCENARIO DB
require __DIR__ . '/once.php';

// The first step that does not answer as written, as a reason; null when all do.
function play(SQLite3 $db, array $steps): ?string
{
    foreach ($steps as $step) {
        try {
            $rows = tinyq_once($db, $step['sql'], $step['args']);
        } catch (Exception $e) {
            if (isset($step['error']) && str_contains($e->getMessage(), $step['error'])) {
                continue;
            }
            return "{$step['name']}: unexpected error {$e->getMessage()}";
        }
        if (isset($step['error'])) {
            return "{$step['name']}: no error, got " . json_encode($rows);
        }
        if ($rows !== $step['rows']) {          // === : the same cells with the same types
            return "{$step['name']}: expected " . json_encode($step['rows']) . ', got ' . json_encode($rows);
        }
    }
    return null;
}

[, $so, $scenario, $path] = $argv;
try {
    $db = tinyq_open($path, $so);
    $reason = play($db, json_decode(file_get_contents($scenario), true)['steps']);
} catch (Throwable $e) {
    $reason = get_class($e) . ': ' . $e->getMessage();
}
if ($reason !== null) {
    echo "php: failed: $reason\n";
    exit(1);
}
printf("php: passed (SQLite %s; SQLite3, PHP %s)\n", $db->querySingle('SELECT sqlite_version()'), PHP_VERSION);
