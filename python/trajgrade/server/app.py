"""Server wiring: core, batcher, gRPC server, health, reflection, TLS, signals, drain, workers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import time
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from trajgrade import _core
from trajgrade.live.routes import RoutesError
from trajgrade.live.watch import watch_handler
from trajgrade.server import front, logs
from trajgrade.server.admission import Admission
from trajgrade.server.auth import BearerTokenInterceptor
from trajgrade.server.batcher import Batcher
from trajgrade.server.metrics import ServerMetrics
from trajgrade.server.servicer import SERVICE_NAME, GraderServicer, generic_handler
from trajgrade.server.settings import Settings
from trajgrade.server.tls import server_credentials

log = logging.getLogger("trajgrade.server")

# Drain: how long without a new call counts as "gRPC's backlog is empty"; the most time spent
# letting those calls in to refuse them, past the grace period if need be (a refusal costs
# microseconds, a CANCELLED call an unexplained failure); and the grace given to the refusals
# still running when the server stops.
_QUIET_S = 0.1
_MAX_SETTLE_S = 5.0
_STOP_GRACE_S = 0.2
# GIL switch interval of a serving process (see serve_until_signalled).
_SWITCH_INTERVAL_S = 0.0005

# Exit codes of `trajgrade serve` (docs/server.md, "Shutdown"): drained; accepted calls cut
# at the grace period's end, or the server failed; a bad configuration; drained, but live
# results were lost (open runs not graded, records not written back, sink rows not written).
EXIT_DRAINED = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_LIVE_LOST = 3

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def make_grader(settings: Settings) -> _core.Grader:
    """The core grader with every SPEC 7 limit taken from the settings."""
    limits = _core.Limits(
        max_trace_bytes=settings.max_trace_bytes,
        max_calls_per_trace=settings.max_calls_per_trace,
        max_argument_bytes=settings.max_argument_bytes,
        max_json_depth=settings.max_json_depth,
        max_regex_bytes=settings.max_regex_bytes,
        max_assertions_per_suite=settings.max_assertions_per_suite,
        max_suite_bytes=settings.max_suite_bytes,
        suite_cache_size=settings.suite_cache_size,
        max_batch_items=settings.max_batch_items,
        max_work_units=settings.max_work_units,
        expression_cost_limit=settings.expression_cost_limit,
    )
    return _core.Grader(
        limits,
        threads=settings.grade_threads,
        max_registered_suites=settings.max_registered_suites,
    )


class GradingServer:
    """One server process: start() binds and serves; shutdown() drains (STYLE 6.6)."""

    def __init__(self, settings: Settings, grader: _core.Grader | None = None) -> None:
        self.settings = settings
        # Built here, in the process that serves: a rayon pool does not survive fork.
        self.grader = grader if grader is not None else make_grader(settings)
        self.metrics = ServerMetrics()
        self.health = health.aio.HealthServicer()
        self.ports: list[int] = []
        self.metrics_port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._batcher: Batcher | None = None
        self._servicer: GraderServicer | None = None
        self._admission: Admission | None = None
        self._control: concurrent.futures.ThreadPoolExecutor | None = None
        self._stopped = asyncio.Event()
        self._shutting_down = False
        # Live grading (docs/live-grading.md): only with --otlp-grpc / --otlp-http.
        self.live: Any = None  # trajgrade.live.grading.LiveGrader
        self.otlp_grpc_port: int | None = None
        self.otlp_http_port: int | None = None
        self._otlp_grpc: Any = None  # (receiver, OtlpGrpcServer)
        self._otlp_http: Any = None  # (receiver, aiohttp AppRunner)
        self._front: Any = None  # trajgrade.server.front.CoreFront
        # Set by the drain: live results were lost at shutdown (EXIT_LIVE_LOST).
        self.live_results_lost = False

    @property
    def batcher(self) -> Batcher:
        """The batcher (after start())."""
        assert self._batcher is not None, "start() first"
        return self._batcher

    def _options(self) -> list[tuple[str, Any]]:
        s = self.settings
        return [
            ("grpc.max_receive_message_length", s.max_message_bytes),
            ("grpc.max_send_message_length", s.max_message_bytes),
            # gRPC sets SO_REUSEPORT by default on Linux, so a second server would silently share
            # the port; only --workers asks for sharing, otherwise a taken port is an error.
            ("grpc.so_reuseport", 1 if s.workers > 1 else 0),
            # gRPC's backlog of calls not yet taken by the event loop. Its defaults (1,000, then
            # random early drops up to 3,000) cancel a burst's calls before any handler runs;
            # sized here so overload reaches our own RESOURCE_EXHAUSTED (queue, call cap).
            ("grpc.server.max_pending_requests", s.max_pending_rpcs),
            ("grpc.server.max_pending_requests_hard_limit", s.max_pending_rpcs),
        ]

    async def start(self) -> list[int]:
        """Bind every listen address, start serving, then report SERVING; returns bound ports."""
        s = self.settings
        if s.live_enabled:
            self._load_live()
        interceptors = []
        token = s.bearer_token()
        if token is not None:
            interceptors.append(BearerTokenInterceptor(token))
        self._batcher = Batcher(
            self.grader,
            max_batch_size=s.effective_batch_size,
            max_batch_delay_s=s.max_batch_delay_us / 1e6 if s.batching else 0.0,
            max_queue_size=s.max_queue_size,
            max_queue_bytes=s.max_queue_bytes,
            executor_threads=s.executor_threads,
            metrics=self.metrics,
            retry_after_ms=s.retry_after_ms,
            # Only the core's own grader: a wrapper may block, which the loop must never do.
            grade_here=(
                self.grader.grade_requests_here if isinstance(self.grader, _core.Grader) else None
            ),
            inline_bytes=s.inline_grade_bytes,
            inline_work_units=s.inline_work_units,
        )
        self._control = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="trajgrade-control"
        )
        servicer = self._servicer = GraderServicer(
            self.grader,
            self._batcher,
            self._control,
            stream_window=s.stream_window,
            max_batch_items=s.max_batch_items,
        )
        # No maximum_concurrent_rpcs for grpc.aio: it does not refuse calls, it stops taking
        # them, and they wait in gRPC's backlog until they are cancelled (admission.py).
        server = grpc.aio.server(interceptors=interceptors, options=self._options())
        self._admission = Admission(
            generic_handler(servicer, self.metrics),
            self.metrics,
            max_concurrent_rpcs=s.max_concurrent_rpcs,
            retry_after_ms=s.retry_after_ms,
        )
        server.add_generic_rpc_handlers((self._admission,))
        # WatchResults is long-lived: outside admission (the live drain ends its streams).
        server.add_generic_rpc_handlers(
            (watch_handler(lambda: None if self.live is None else self.live.hub, self.metrics),)
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for name in (health.OVERALL_HEALTH, SERVICE_NAME):
            await self.health.set(name, _NOT_SERVING)
        if s.reflection:
            reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        credentials = server_credentials(s)
        addresses = s.listen
        if front.wanted(s):
            # The core's front serves the TCP addresses; grpc.aio the unix-socket ones and its
            # private socket (plaintext: only this user can reach it).
            self._front = front.CoreFront(s, self.live.hub, self.metrics)
            addresses = tuple(a for a in s.listen if not front.is_tcp(a))
            server.add_insecure_port(self._front.upstream_address)
        bound = {}
        for address in addresses:
            if credentials is None:
                bound[address] = server.add_insecure_port(address)
            else:
                bound[address] = server.add_secure_port(address, credentials)
        self._server = server
        self._batcher.start()
        await server.start()
        if self._front is not None:
            bound |= self._front.start(token)
        self.ports = [bound[address] for address in s.listen]
        if s.metrics_port is not None:
            self.metrics_port = self.metrics.serve_http(s.metrics_host, s.metrics_port)
        if s.live_enabled:
            await self._start_live(token, credentials)
        # SERVING only now that the port accepts calls (jina, STYLE 6.6).
        for name in (health.OVERALL_HEALTH, SERVICE_NAME):
            await self.health.set(name, _SERVING)
        log.info(
            "serving %s on %s%s (batch %d, delay %dus, workers %d)",
            SERVICE_NAME,
            ", ".join(s.listen),
            " with TLS" if credentials is not None else "",
            s.effective_batch_size,
            s.max_batch_delay_us if s.batching else 0,
            s.workers,
            extra={"ports": self.ports},
        )
        return self.ports

    def _load_live(self) -> None:
        """The live grader, its routes loaded: before anything binds, so that a bad routes
        file stops startup cleanly (imported only when asked for)."""
        from trajgrade.live.grading import LiveGrader  # noqa: PLC0415

        assert isinstance(self.grader, _core.Grader), "live grading needs the core's grader"
        self.live = LiveGrader(self.settings, self.grader, self.metrics.live)
        self.live.start()

    async def _start_live(self, token: str | None, credentials: Any) -> None:
        """The OTLP receivers."""
        from trajgrade.live.otlp_grpc import (  # noqa: PLC0415
            OtlpGrpcReceiver,
            otlp_grpc_server,
        )
        from trajgrade.live.otlp_http import (  # noqa: PLC0415
            OtlpHttpReceiver,
            ssl_context,
            start_http,
        )

        s = self.settings
        if s.otlp_grpc_address is not None:
            receiver = OtlpGrpcReceiver(self.live)
            server, port = otlp_grpc_server(
                receiver,
                s.otlp_grpc_address,
                token=token,
                settings=s,
                credentials=credentials,
                max_message_bytes=s.otlp_max_message_bytes,
            )
            await server.start()
            self._otlp_grpc = (receiver, server)
            self.otlp_grpc_port = port
            log.info("OTLP/gRPC receiver on %s", s.otlp_grpc_address, extra={"port": port})
        if s.otlp_http_address is not None:
            http = OtlpHttpReceiver(self.live, token, s.otlp_max_message_bytes)
            runner, bound = await start_http(http, s.otlp_http_address, ssl_context(s))
            self._otlp_http = (http, runner)
            self.otlp_http_port = bound
            log.info("OTLP/HTTP receiver on %s", s.otlp_http_address, extra={"port": bound})

    async def _drain_live(self, grace: float) -> None:
        """Refuse new exports (retryable for exporters), then grade every open run as cut
        off and write it out before the rest of the drain, within the grace period."""
        if self._otlp_grpc is not None:
            self._otlp_grpc[0].draining = True
        if self._otlp_http is not None:
            self._otlp_http[0].draining = True
        if self.live is not None:
            self.live_results_lost = (await self.live.drain(grace)).lost
        if self._otlp_grpc is not None:
            await self._otlp_grpc[1].stop(_STOP_GRACE_S)
        if self._otlp_http is not None:
            await self._otlp_http[1].cleanup()
            self._otlp_http[0].close()

    def reload_routes(self) -> None:
        """SIGHUP: reload the live routes file (no-op without live grading)."""
        if self.live is not None:
            self.live.reload_routes()

    async def shutdown(self, grace: float | None = None) -> bool:
        """Drain: NOT_SERVING, refuse new work, finish accepted work within grace, stop.

        Returns True when every accepted call was answered within the grace period.
        """
        if self._shutting_down:
            await self._stopped.wait()
            return True
        self._shutting_down = True
        grace = self.settings.grace_period_s if grace is None else grace
        started = time.monotonic()
        until = started + grace
        log.info("draining (grace %.1fs): health NOT_SERVING, refusing new work", grace)
        await self.health.enter_graceful_shutdown()
        await self._drain_live(grace)
        drained = True
        # New calls get UNAVAILABLE (SHUTTING_DOWN) from our handlers from here on, queued work
        # is still graded, and open streams end once their accepted messages are answered. The
        # port stays open meanwhile: health checks see NOT_SERVING rather than a refused
        # connection, and callers get a status that says why.
        if self._admission is not None:
            self._admission.draining = True
        if self._batcher is not None:
            self._batcher.close()
            if self._servicer is not None:
                self._servicer.close_streams()
            # What the live drain left of the grace period (a moment at least: an idle batcher
            # still has to see the close).
            drained = await self._batcher.drain(max(until - time.monotonic(), _STOP_GRACE_S))
        if self._admission is not None:
            # Accepted calls still sending their answers (streams, RegisterSuite, ...).
            drained = await self._admission.wait_idle(until - time.monotonic()) and drained
            # Calls gRPC still holds, not yet handed to a handler, would be CANCELLED by the
            # stop: let them in to be refused (UNAVAILABLE) until none has arrived for a moment.
            await self._settle(time.monotonic() + _MAX_SETTLE_S)
        # Accepted calls still running now are past the grace period: the stop cuts them.
        cut = 0 if self._admission is None else self._admission.active
        if self._server is not None:
            await self._server.stop(max(until - time.monotonic(), _STOP_GRACE_S))
        if self._front is not None:
            await self._front.stop(_STOP_GRACE_S)
        if self._batcher is not None:
            await self._batcher.stop()
        if self._control is not None:
            self._control.shutdown(wait=False, cancel_futures=True)
        self.metrics.close()
        self._stopped.set()
        elapsed = time.monotonic() - started
        answered = self.metrics.answered()
        if drained:
            log.info("drained in %.2fs; stopped", elapsed, extra={"answered": answered})
        else:
            log.error(
                "grace period of %.1fs ran out with work still running (%d calls cut); "
                "stopped after %.2fs",
                grace,
                cut,
                elapsed,
                extra={"answered": answered},
            )
        return drained

    async def _settle(self, until: float) -> None:
        """Wait (at most until `until`) for _QUIET_S without a new call, and for the refusals
        to have sent their status."""
        admission = self._admission
        assert admission is not None
        while True:
            now = time.monotonic()
            quiet_at = admission.last_arrival + _QUIET_S
            if now >= until or (now >= quiet_at and not admission.refusing):
                return
            await asyncio.sleep(min(max(quiet_at - now, 0.01), until - now))

    async def force_stop(self) -> None:
        """Cancel every running RPC now (a second SIGTERM/SIGINT during the drain)."""
        if self._server is not None:
            await self._server.stop(0)
        if self._front is not None:
            await self._front.stop(0)

    async def wait_stopped(self) -> None:
        """Return once shutdown() has finished."""
        await self._stopped.wait()


async def serve_until_signalled(settings: Settings, early: list[int] | None = None) -> int:
    """Run one server until SIGTERM/SIGINT, then drain. Exit code EXIT_DRAINED (0) iff the
    drain completed with nothing lost, else EXIT_FAILED or EXIT_LIVE_LOST.

    ``early`` holds signals that arrived while the process was still starting; they count.
    """
    server = GradingServer(settings)
    await server.start()
    # What startup built (modules, descriptors, compiled suites) lives as long as the process:
    # kept out of the collector's sight, so that a full collection scans only what serving
    # made (scanning it all took tens of ms, with the loop stopped: a live result's p99).
    gc.collect()
    gc.freeze()
    # The loop and the live grading thread hand the GIL back and forth several times per
    # trip (each core call releases it); with Python's default 5 ms switch interval a thread
    # waiting for it while the loop runs Python waits up to 5 ms, a live result's whole budget.
    # Only with the live receiver on: a plain server's threads keep Python's default.
    if settings.live_enabled:
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0
    forced: list[asyncio.Task[None]] = []  # keep a reference so the task is not collected

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("received %s", signal.Signals(signum).name)
            stop.set()
        else:
            log.warning("second %s: stopping without waiting", signal.Signals(signum).name)
            forced.append(loop.create_task(server.force_stop()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    if settings.live_enabled:
        loop.add_signal_handler(signal.SIGHUP, server.reload_routes)
    for received in early or ():
        on_signal(received)
    await stop.wait()
    if not await server.shutdown():
        return EXIT_FAILED
    return EXIT_LIVE_LOST if server.live_results_lost else EXIT_DRAINED


def run_worker(settings: Settings, index: int = 0) -> int:
    """Entry point of one worker process (also the only process when workers == 1)."""
    logs.configure(settings.log_format, settings.log_level)
    if index and settings.metrics_port:
        settings = settings.replace(metrics_port=settings.metrics_port + index)
    # A signal during startup (a supervisor stopping us early) must still end in a drain and
    # exit 0, not in the default SIGTERM death: remember it until the loop's handlers exist.
    early: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: early.append(received))
    if settings.live_enabled:
        # A SIGHUP (routes reload) before the loop's handler exists must not kill the server.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return asyncio.run(serve_until_signalled(settings, early))
    except RoutesError as exc:
        log.error("%s", exc)  # the routes file: a configuration error, said plainly
        return EXIT_CONFIG
    except Exception:
        log.exception("server failed")
        return EXIT_FAILED


def _spawned_worker(settings: Settings, index: int) -> None:
    sys.exit(run_worker(settings, index))


def serve(settings: Settings) -> int:
    """`trajgrade serve`: one process, or --workers N spawned processes sharing the port."""
    if settings.workers == 1:
        return run_worker(settings)
    logs.configure(settings.log_format, settings.log_level)
    # spawn, not fork: each worker builds its own Grader (and rayon pool) from scratch.
    context = multiprocessing.get_context("spawn")
    workers: list[multiprocessing.process.BaseProcess] = []  # spawn Processes
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(settings.workers):
        process = context.Process(
            target=_spawned_worker, args=(settings, index), name=f"trajgrade-worker-{index}"
        )
        process.start()
        workers.append(process)
    log.info("started %d workers: %s", len(workers), [w.pid for w in workers])
    exit_code = 0
    remaining = list(workers)
    while remaining:
        for worker in list(remaining):
            worker.join(timeout=0.2)
            if worker.exitcode is None:
                continue
            remaining.remove(worker)
            if worker.exitcode != 0:
                exit_code = 1
            if not stopping:
                # A worker died on its own: stop the rest and let the supervisor restart us.
                log.error("worker %s exited with %s; stopping", worker.pid, worker.exitcode)
                exit_code = 1
                forward(signal.SIGTERM, None)
    return exit_code
