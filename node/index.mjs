// `import { Queue } from 'tinyq'` from ESM: the same module as require('tinyq').
import tinyq from './index.js';

export const { load, open, extensionPath, Queue, Worker, Run, Outcome, Cancelled } = tinyq;
export default tinyq;
