"""Ids of the form `<name>@<ISO-8601 UTC time>` belong to schedules (contract section 2,
CRON-01): tq_add refuses them as chosen ids, so no job can take a schedule's due time,
and the schedules themselves still add theirs."""
import sqlite3

import pytest

from helpers import DAY, T0, claim, get, one, pin, snapshot

ISO_T0 = "2027-01-15T08:00:00Z"  # T0


@pytest.mark.parametrize("job_id", [
    "digest@2027-01-15T08:00:00Z",
    "digest@2027-01-15T08:00:00.500Z",
    "a@b@2027-01-15T08:00:00Z",
    "@2027-01-15T08:00:00Z",
    "digest@2027-01-15T08:00:00+00:00",
    "digest@2027-01-15t08:00:00z",
])
def test_ERR_01_tq_add_refuses_an_id_of_a_schedule(db, job_id):
    one(db, "SELECT tq_queue('q', '{}')")
    before = snapshot(db)
    with pytest.raises(sqlite3.Error) as info:
        one(db, "SELECT tq_add('q', '{}', json_object('id', ?))", job_id)
    assert str(info.value) == (f"tq_add: option \"id\" must not end in '@' and a UTC time ('{job_id}'): "
                               "that form is reserved for the jobs of schedules")
    assert snapshot(db) == before


@pytest.mark.parametrize("job_id", [
    "mail@example.com", "report@2027-01-15", "x@2027-01-15T08:00:00+01:00", "order@41", "a@",
])
def test_ERR_01_other_ids_with_an_at_sign_are_chosen_ids(db, job_id):
    assert one(db, "SELECT tq_add('q', '{}', json_object('id', ?))", job_id) == job_id


def test_CRON_01_a_schedule_still_adds_its_own_ids(db):
    """The run of `digest` at T0 cannot be taken by a chosen id: the schedule adds it."""
    pin(db, T0 - DAY + 1)
    one(db, "SELECT tq_schedule('digest', 'mail', '0 8 * * *', '{\"kind\": \"digest\"}')")
    with pytest.raises(sqlite3.Error, match="reserved for the jobs of schedules"):
        one(db, "SELECT tq_add('other', '{\"evil\": 1}', json_object('id', ?))", f"digest@{ISO_T0}")
    pin(db, T0)
    (job,) = claim(db, "mail")
    assert job["id"] == f"digest@{ISO_T0}"
    assert get(db, job["id"])["payload"] == {"kind": "digest"}
