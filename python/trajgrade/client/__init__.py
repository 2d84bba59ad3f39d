"""The Python client of `trajgrade.v1.GraderService`: `Client` (blocking) and `AsyncClient`.

Both take the same options and have the same methods (`register_suite`, `get_suite`,
`import_suite`, `grade`, `grade_batch`, `grade_stream`, `watch_results`); docs/api.md
describes them. Behaviour
that matters in production:

* Suites travel by `suite_id`. A suite is registered once per client and its id cached by
  content. A replica that answers NOT_FOUND for that id (a fresh replica behind a load
  balancer, or one whose LRU dropped it) gets the suite inline in the same call, so a fleet of
  stateless replicas needs no sticky sessions.
* Every call has a deadline (`timeout`, default 30 s; `grade_stream` has none unless given).
  UNAVAILABLE, RESOURCE_EXHAUSTED when the server has no capacity (queue full, too many
  calls: never sooner than its retry-after), and CANCELLED from gRPC before any handler saw
  the call are retried with exponential back-off and jitter, within the deadline and at most
  `RetryPolicy.max_attempts` times. Grading is a pure function, so every RPC is safe to
  repeat.
* `grade_stream` sends `stream_chunk` traces (default 256) per StreamGradeTraces message; the
  server grades each chunk as one batch, so a stream runs at batch speed rather than at gRPC's
  per-message rate. `chunk_size=1` sends the single-trace form that older servers understand.
* A failed call raises a `trajgrade.errors` exception (`InvalidSuiteError` with `field` and
  `problems`, `SuiteNotFoundError`, `UnavailableError`, ...), the classes the server raises.

The modules: a sans-IO core that decides everything and makes no call (`status`: statuses to
exceptions and which are retried; `retry`: policy, back-off, deadline; `requests`: suites,
batches; `plans`: the unary methods as plans; `stream`: a stream's bookkeeping and plan;
`watch`: a WatchResults call's filters), and
two shells that only do the I/O the plans ask for (`sync`: `Client`; `aio`: `AsyncClient`;
`channel`: the options and channel both open).
"""

from trajgrade.client.aio import AsyncClient
from trajgrade.client.channel import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_STREAM_CHUNK,
    DEFAULT_STREAM_WINDOW,
    DEFAULT_TIMEOUT,
    PathOrBytes,
)
from trajgrade.client.requests import Outcome
from trajgrade.client.retry import NO_RETRY, RetryPolicy
from trajgrade.client.status import error_from_rpc, lost_status, retry_after, retryable
from trajgrade.client.sync import Client
from trajgrade.errors import CallCancelledError as CancelledError
from trajgrade.errors import (
    DeadlineExceededError,
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    ResourceExhaustedError,
    ServiceError,
    SuiteNotFoundError,
    TrajgradeError,
    UnauthenticatedError,
    UnavailableError,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_STREAM_CHUNK",
    "DEFAULT_STREAM_WINDOW",
    "DEFAULT_TIMEOUT",
    "NO_RETRY",
    "AsyncClient",
    "CancelledError",
    "Client",
    "DeadlineExceededError",
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "LimitExceededError",
    "Outcome",
    "PathOrBytes",
    "ResourceExhaustedError",
    "RetryPolicy",
    "ServiceError",
    "SuiteNotFoundError",
    "TrajgradeError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_rpc",
    "lost_status",
    "retry_after",
    "retryable",
]
