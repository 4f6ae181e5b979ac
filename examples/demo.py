#!/usr/bin/env python3
"""The crash story, in real processes: a worker dies after keeping a step, the next one
takes over with the kept answer, and the reply is written exactly once.

    make demo            # or: /usr/bin/python3 examples/demo.py

Run with no arguments it narrates; `demo.py worker N` is one worker process.
"""
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import tinyq  # noqa: E402

DB = os.path.join(HERE, "demo.db")
QUEUE = "replies"
LEASE = "2s"                 # short, so a dead worker's lease runs out within the demo
MODEL_SECONDS = 1.5          # the deliberately slow fake model call
SEND_SECONDS = 1.0           # time spent "sending"
STUCK_SECONDS = 60.0         # worker 1's send hangs (a stuck provider); it is killed in here
ANSWER = "Hello! Your parcel left the warehouse this morning."
START = float(os.environ.get("DEMO_START", time.time()))   # workers share the clock


def say(who, text):
    print("%5.2fs  %-9s| %s" % (time.time() - START, who, text), flush=True)


# -- a worker process ------------------------------------------------------------------

def worker(n):
    who = "worker %d" % n
    replies = tinyq.Queue(DB, QUEUE)

    def reply(payload, run):
        say(who, "claimed %s, attempt %d" % (run.id, run.attempt))
        asked = []

        def ask_model():
            asked.append(True)
            say(who, "asking the model (slow)...")
            time.sleep(MODEL_SECONDS)
            return ANSWER

        answer = run.step("answer", ask_model)
        if asked:
            say(who, "step 'answer' kept: %r" % answer)
        else:
            say(who, "step 'answer' came back kept, the model was not asked again: %r" % answer)
        if n == 1:
            say(who, "sending the reply... (the mail provider hangs)")
            time.sleep(STUCK_SECONDS)
        else:
            say(who, "sending the reply...")
            time.sleep(SEND_SECONDS)
        cur = run.conn.execute(
            "INSERT INTO messages (reply_to, body) VALUES (?, ?) "
            "ON CONFLICT (reply_to) DO NOTHING", (payload["messageId"], answer))
        say(who, "reply inserted" if cur.rowcount else "a reply was already there")
        replies.stop()            # this demo's workers take one job and leave
        return {"sent": True}

    say(who, "started (pid %d), waiting for a job" % os.getpid())
    replies.work(reply, worker="worker-%d" % n, poll=0.5)
    say(who, "job settled, exiting")


# -- the narrator ----------------------------------------------------------------------

def watcher(stop):
    """Prints every state change of the queue as tq_watch reports it, as it happens."""
    replies = tinyq.Queue(DB, QUEUE)
    since = 0
    while True:
        done = stop.is_set()
        for event in replies.watch(since):
            since = event["seq"]
            detail = "" if event["detail"] is None else "  (%s)" % event["detail"]
            say("watcher", "%-10s %s attempt %s%s"
                % (event["state"], event["id"], event["attempt"], detail))
        if done:
            break
        time.sleep(0.05)
    replies.close()


def spawn(n):
    env = dict(os.environ, DEMO_START=repr(START))
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", str(n)], env=env)


def main():
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(DB + suffix):
            os.remove(DB + suffix)
    conn = tinyq.open(DB)
    replies = tinyq.Queue(conn, QUEUE)
    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, reply_to INTEGER UNIQUE, body TEXT)")
    replies.settings(lease=LEASE)
    say("demo", "store %s, queue %r with a %s lease" % (os.path.relpath(DB), QUEUE, LEASE))

    stop_watching = threading.Event()
    watch_thread = threading.Thread(target=watcher, args=(stop_watching,))
    watch_thread.start()

    conn.execute("BEGIN IMMEDIATE")          # the job commits with the row it is about
    conn.execute("INSERT INTO messages (id, body) VALUES (41, 'Where is my parcel?')")
    replies.add({"messageId": 41}, id="reply:41")
    conn.execute("COMMIT")
    say("demo", "message 41 and job reply:41 committed in one transaction")

    first = spawn(1)
    deadline = time.time() + 60
    while conn.execute("SELECT tq_step_get('reply:41', 'answer')").fetchone()[0] is None:
        if time.time() > deadline or first.poll() is not None:
            raise SystemExit("worker 1 never kept its step")
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    say("demo", "killed worker 1 with SIGKILL after it kept the answer, before it sent the reply")
    job = replies.get("reply:41")
    say("demo", "the job is %s, attempt %d, no reply row yet" % (job["state"], job["attempt"]))
    say("demo", "starting worker 2: the next claim ends the dead process's lease at once "
        "(or, at the latest, the %s lease runs out)" % LEASE)

    second = spawn(2)
    second.wait(timeout=60)
    stop_watching.set()                      # the watcher reads once more: the last events
    watch_thread.join()

    job = replies.get("reply:41")
    say("demo", "job %s: %s after attempt %d, result %s"
        % (job["id"], job["state"], job["attempt"], job["result"]))
    rows = conn.execute("SELECT id, reply_to, body FROM messages WHERE reply_to = 41").fetchall()
    for row in rows:
        say("demo", "reply row: id=%d reply_to=%d body=%r" % row)
    say("demo", "reply rows: %d" % len(rows))
    conn.close()
    ok = second.returncode == 0 and job["state"] == "done" and job["attempt"] == 2 and len(rows) == 1
    say("demo", "the answer was computed once and the reply written once" if ok else "UNEXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(int(sys.argv[2]))
    else:
        sys.exit(main())
