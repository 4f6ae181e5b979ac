"""The dashboard's /metrics: Prometheus' text format (version 0.0.4) of a store."""
from . import views


def metrics_text(conn, stats, starts, failures, schedules, now):
    """The Prometheus text exposition (version 0.0.4) of a store."""
    out = []

    def family(name, kind, help, samples):
        out.append("# HELP %s %s" % (name, help))
        out.append("# TYPE %s %s" % (name, kind))
        for labels, value in samples:
            text = ",".join('%s="%s"' % (k, escape(v)) for k, v in labels)
            out.append("%s{%s} %s" % (name, text, value))

    family("tinyq_jobs", "gauge", "Jobs by queue and state.",
           [((("queue", q["queue"]), ("state", s)), q[s]) for q in stats for s in views.STATES if s in q])
    family("tinyq_running_leases", "gauge", "Running jobs whose lease has not run out.",
           [((("queue", q["queue"]),), q["leases"]) for q in stats])
    family("tinyq_oldest_waiting_seconds", "gauge", "How long the longest-waiting due job has been due.",
           [((("queue", q["queue"]),), (q["oldest_waiting_ms"] or 0) / 1000) for q in stats])
    family("tinyq_queue_paused", "gauge", "1 when the queue is paused.",
           [((("queue", q["queue"]),), q["paused"]) for q in stats])
    names = sorted({q["queue"] for q in stats} | set(starts) | set(failures))
    family("tinyq_starts_total", "counter", "Attempts started (claims), seen by this dashboard since it started.",
           [((("queue", n),), starts.get(n, 0)) for n in names])
    family("tinyq_failures_total", "counter", "Jobs failed for good, seen by this dashboard since it started.",
           [((("queue", n),), failures.get(n, 0)) for n in names])
    if schedules is not None:
        family("tinyq_schedule_lag_seconds", "gauge",
               "How far past its next time a schedule is (0 while it is not due; paused: 0).",
               [((("queue", s["queue"]), ("schedule", s["name"])),
                 max(0, now - s["next_at"]) / 1000 if s["next_at"] is not None and not s["paused"] else 0)
                for s in schedules])
    return "\n".join(out) + "\n"


def escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
