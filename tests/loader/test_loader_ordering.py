"""TaskLedger: task accounting and reordering, without processes."""

from __future__ import annotations

import pytest

from datakit.loader.workers.ordering import END, WAIT, Delivery, TaskLedger


def send(ledger: TaskLedger, count: int) -> list[tuple[int, int]]:
    sent = []
    for _ in range(count):
        worker = ledger.choose_worker()
        assert worker is not None
        sent.append((ledger.record_sent(worker), worker))
    return sent


def test_round_robin_and_capacity():
    ledger = TaskLedger(num_workers=3, prefetch_factor=2)
    assert [worker for _, worker in send(ledger, 6)] == [0, 1, 2, 0, 1, 2]
    assert not ledger.has_room()
    with pytest.raises(AssertionError):
        ledger.choose_worker()


def test_results_are_delivered_in_task_order():
    ledger = TaskLedger(num_workers=2, prefetch_factor=2)
    send(ledger, 4)
    assert ledger.next_ready() is WAIT
    assert ledger.record_result(2, "c") is None  # early: buffered
    assert ledger.record_result(1, "b") is None
    assert ledger.next_ready() is WAIT
    assert ledger.record_result(0, "a") == Delivery(0, 0, "a")
    assert ledger.next_ready() == Delivery(1, 1, "b")
    assert ledger.next_ready() == Delivery(2, 0, "c")
    assert ledger.next_ready() is WAIT
    assert ledger.record_result(3, "d") == Delivery(3, 1, "d")
    assert ledger.next_ready() is END
    assert ledger.worker_load == [0, 0]


def test_out_of_order_mode_delivers_on_arrival_and_skips_delivered():
    ledger = TaskLedger(num_workers=2, prefetch_factor=1, in_order=False)
    send(ledger, 2)
    assert ledger.record_result(1, "b") == Delivery(1, 1, "b")
    assert ledger.next_ready() is WAIT
    assert ledger.record_result(0, "a") == Delivery(0, 0, "a")
    assert ledger.next_ready() is END


def test_out_of_order_mode_balances_load():
    ledger = TaskLedger(num_workers=2, prefetch_factor=2, in_order=False)
    send(ledger, 3)  # workers 0, 1, 0
    assert ledger.record_result(0, "a") is not None  # worker 0 now holds 1 task, worker 1 holds 1
    assert ledger.choose_worker() == 1
    ledger.record_sent(1)
    # worker 0 holds 1 < 4 // 2, worker 1 holds 2: only worker 0 qualifies
    assert ledger.choose_worker() == 0


def test_exhausted_worker_is_skipped_and_its_tasks_dropped():
    ledger = TaskLedger(num_workers=2, prefetch_factor=2)
    send(ledger, 4)  # 0->w0, 1->w1, 2->w0, 3->w1
    ledger.record_exhausted(0, worker_id=0)
    assert ledger.active == [False, True]
    assert ledger.next_ready() is WAIT  # task 0 skipped, task 1 (worker 1) awaited
    assert ledger.choose_worker() == 1
    assert ledger.record_result(1, "b") == Delivery(1, 1, "b")
    assert ledger.next_ready() is WAIT  # task 2 belonged to the retired worker: skipped; task 3 awaited
    assert ledger.record_result(3, "d") == Delivery(3, 1, "d")
    assert ledger.next_ready() is END


def test_no_worker_when_all_exhausted():
    ledger = TaskLedger(num_workers=2, prefetch_factor=1)
    send(ledger, 2)
    ledger.record_exhausted(0, 0)
    ledger.record_exhausted(1, 1)
    assert ledger.choose_worker() is None
    assert ledger.next_ready() is END


def test_reset_ignores_stale_results():
    ledger = TaskLedger(num_workers=1, prefetch_factor=2)
    send(ledger, 2)
    ledger.reset(first_task_id=ledger.next_send)
    assert not ledger.is_current(0)
    assert ledger.record_result(0, "stale") is None
    assert ledger.outstanding == 0
    assert send(ledger, 1) == [(2, 0)]
    assert ledger.record_result(2, "fresh") == Delivery(2, 0, "fresh")


def test_rejects_empty_configuration():
    with pytest.raises(ValueError):
        TaskLedger(num_workers=0, prefetch_factor=2)
