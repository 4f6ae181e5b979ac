// Type-checked by test/types.test.js: the same package from CommonJS (require).
import tinyq = require('tinyq');

const q = new tinyq.Queue<{ n: number }>('app.db', 'q');
q.add({ n: 1 }, { priority: 5, group: 'acme', attempts: 3 });
void q.stop().then((handled: number) => handled + 1);
// @ts-expect-error: cancel takes an id
q.cancel(42);
