"""The client's calls as plans (sans-IO): generators that say what to do next and are told
what happened, so one piece of code decides retries, inline suites and answers for both the
blocking and the asyncio client.

A plan yields steps: `Call` (the shell makes that unary call and sends back the decoded answer,
or `Failed`) and `Sleep` (the shell waits, then sends None). Its return value is the method's
result; an exception it raises is the method's error. The shells (sync.py, aio.py) only do the
I/O each step names.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from trajgrade.client.requests import (
    Batch,
    Outcome,
    SuiteCache,
    SuiteRef,
    import_request,
)
from trajgrade.client.retry import Deadline, Retry, RetryPolicy
from trajgrade.client.status import Failed
from trajgrade.errors import SuiteNotFoundError
from trajgrade.suites import SuiteInput
from trajgrade.traces import TraceInput, trace_bytes
from trajgrade.v1 import grader_service_pb2, result_pb2, suite_pb2
from trajgrade.wire import length_delimited as _field

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Make unary call `method` (a key of requests.METHODS) with `request`, within `timeout`."""

    method: str
    request: bytes
    timeout: float | None


@dataclass(frozen=True)
class Sleep:
    """Wait `seconds` before the next attempt."""

    seconds: float


Plan: TypeAlias = Generator[Call | Sleep, object, T]


def call(method: str, request: bytes, retry: Retry) -> Plan[Any]:
    """One unary call, retried as `retry` decides; its decoded answer."""
    while True:
        reply = yield Call(method, request, retry.deadline.remaining())
        if not isinstance(reply, Failed):
            return reply
        wait = retry.delay(reply.error)
        if wait is None:
            raise reply.error from reply.cause
        yield Sleep(wait)


class Calls:
    """The plans of the client's methods, sharing one retry policy, random source and suite
    cache (the cache is thread-safe: a blocking client is shared by threads)."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.rng = rng or random.Random()
        self.suites = SuiteCache()

    def call(self, method: str, request: bytes, deadline: Deadline) -> Plan[Any]:
        """One unary call with its own attempt budget, within the method's deadline."""
        return call(method, request, Retry(self.policy, deadline, self.rng))

    def _register(self, ref: SuiteRef, deadline: Deadline) -> Plan[str]:
        assert ref.encoded is not None
        response = yield from self.call("RegisterSuite", _field(1, ref.encoded), deadline)
        suite_id: str = response.suite_id
        self.suites.remember(ref, suite_id)
        return suite_id

    def by_id(self, suite: SuiteInput, deadline: Deadline) -> Plan[SuiteRef]:
        """The suite's reference, registering it first if this client has no id for it."""
        ref = self.suites.ref(suite)
        if ref.suite_id is None:
            yield from self._register(ref, deadline)
        return ref

    def _by_ref(
        self, method: str, request: Callable[[bool], bytes], ref: SuiteRef, deadline: Deadline
    ) -> Plan[Any]:
        """`method` with the suite by id; a replica that does not hold the id (NOT_FOUND) gets
        the same call with the suite inline. `request(inline)` encodes it."""
        try:
            return (yield from self.call(method, request(False), deadline))
        except SuiteNotFoundError:
            if ref.encoded is None:
                raise
            return (yield from self.call(method, request(True), deadline))

    def register_suite(self, suite: SuiteInput, deadline: Deadline) -> Plan[str]:
        """See `Client.register_suite`."""
        ref = self.suites.ref(suite)
        if ref.encoded is None:
            raise TypeError("register_suite needs the suite itself, not only its id")
        return (yield from self._register(ref, deadline))

    def get_suite(self, suite_id: str, deadline: Deadline) -> Plan[suite_pb2.Suite]:
        """See `Client.get_suite`."""
        request = grader_service_pb2.GetSuiteRequest(suite_id=suite_id).SerializeToString()
        try:
            response = yield from self.call("GetSuite", request, deadline)
        except SuiteNotFoundError:
            known = self.suites.encoded(suite_id)
            if known is None:
                raise
            return suite_pb2.Suite.FromString(known)
        suite: suite_pb2.Suite = response.suite
        return suite

    def import_suite(
        self, text: str, format: str, skip_unsupported: bool, name: str, deadline: Deadline
    ) -> Plan[grader_service_pb2.ImportSuiteResponse]:
        """See `Client.import_suite`."""
        request = import_request(text, format, skip_unsupported, name)
        response: grader_service_pb2.ImportSuiteResponse = yield from self.call(
            "ImportSuite", request, deadline
        )
        self.suites.remember(self.suites.ref(response.suite), response.suite_id)
        return response

    def grade(
        self, trace: TraceInput, suite: SuiteInput, deadline: Deadline
    ) -> Plan[result_pb2.GradeResult]:
        """See `Client.grade`."""
        ref = yield from self.by_id(suite, deadline)
        encoded = _field(1, trace_bytes(trace))

        def request(inline: bool) -> bytes:
            return encoded + ref.fields(2, 3, inline=inline)

        response = yield from self._by_ref("GradeTrace", request, ref, deadline)
        result: result_pb2.GradeResult = response.result
        return result

    def grade_batch(
        self, traces: Iterable[TraceInput], suite: SuiteInput, deadline: Deadline
    ) -> Plan[list[Outcome]]:
        """See `Client.grade_batch`."""
        ref = yield from self.by_id(suite, deadline)
        batch = Batch.of(traces)
        if not batch.payloads:
            return batch.outcomes(grader_service_pb2.BatchGradeTracesResponse())

        def request(inline: bool) -> bytes:
            return batch.request(ref, inline=inline)

        response = yield from self._by_ref("BatchGradeTraces", request, ref, deadline)
        return batch.outcomes(response)
