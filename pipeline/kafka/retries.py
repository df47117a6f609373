"""Which broker errors are worth retrying, and the retry policy for broker reads."""

from __future__ import annotations

import logging
from collections.abc import Callable

import tenacity
from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger(__name__)


#: Kafka errors that a leader or coordinator moving between brokers, or a broker
#: restarting, answers for a while: asked again, the same request succeeds. Met on
#: Apache Kafka's 3-node cluster with a partition leader killed (NOT_COORDINATOR,
#: FENCED_LEADER_EPOCH for seconds after the election).
TRANSIENT_BROKER_ERRORS = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError._NOENT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_ENOUGH_REPLICAS,
    }
)


def transient_kafka_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a :class:`KafkaException` that asking again may cure: its
    error says so itself (``retriable()``), or it is one of
    :data:`TRANSIENT_BROKER_ERRORS`."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    if not isinstance(error, KafkaError):
        return False
    return bool(error.retriable()) or error.code() in TRANSIENT_BROKER_ERRORS


def broker_retrying(
    retry_on: type[BaseException] | Callable[[BaseException], bool],
    wait_s: float,
    before_retry: Callable[[int, BaseException | None], None] | None = None,
    *,
    max_backoff_s: float = 2.0,
) -> tenacity.Retrying:
    """Tenacity's ``Retrying`` for a read of a broker that may be restarting, or whose
    leader or coordinator is moving: the one retry policy of every broker read.

    Args:
        retry_on: an exception type tried again whenever raised, or a predicate of the
            exception (:func:`transient_kafka_error`: only what asking again may cure).
        wait_s: how long to keep trying, seconds; then the last error is raised.
        before_retry: ``before_retry(attempt, error)`` runs before each new try (to log
            it, with the caller's ``FG-*`` code).
        max_backoff_s: the longest wait between tries; the first is 0.1 s, doubling.
    """
    retry = (
        tenacity.retry_if_exception_type(retry_on)
        if isinstance(retry_on, type)
        else tenacity.retry_if_exception(retry_on)
    )
    return tenacity.Retrying(
        retry=retry,
        stop=tenacity.stop_after_delay(wait_s),
        wait=tenacity.wait_exponential(multiplier=0.1, max=max_backoff_s),
        before_sleep=(
            None
            if before_retry is None
            else lambda state: before_retry(
                state.attempt_number, state.outcome.exception() if state.outcome else None
            )
        ),
        reraise=True,
    )


#: Seconds a micro-batch's output queue check keeps reading through a broker outage (a
#: restart) before the batch fails; the query would otherwise fail on the first refusal.
BROKER_WAIT_S = 60.0
