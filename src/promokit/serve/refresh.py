"""Switching a running service to another version of its campaign directory, without downtime.

Each worker process serves one :class:`~promokit.serve.decision_rule.DecisionRule` at a time. A switch loads the
new version (memory-mapped: milliseconds whatever its size), checks that it fits the live one
(:func:`~promokit.campaign.directory.refresh_problem`), hands the old pacer's state to the new one
(:meth:`~promokit.serve.pacing.Pacer.carry`) and replaces the rule in one assignment. A request reads the rule
once, when it arrives, so a request in flight finishes on the version it started on; the ledger, and with it the
money at risk under the cap, is the same before and after. A version that does not load or does not fit is
refused and the live one kept.

A worker switches when

- ``POST /v1/campaign/switch`` asks it (``how = "endpoint"``); it also points ``live.json`` at the version, even
  one it serves already, so
- every other worker, polling ``live.json`` every :data:`WATCH_SECONDS`, follows (``"pointer"``), as it does when
  ``promokit campaign switch`` or ``campaign build --activate`` moved the pointer;
- it gets SIGHUP, which makes it read the pointer at once (``"signal"``).

Order. Every write of ``live.json`` is numbered under a lock (:func:`~promokit.campaign.versions.point_live`), so the
pointer names the last switch acknowledged, whichever worker received it. A worker follows the pointer whenever it
moved since it last acted on it, and reads it again with its own switches held off, so a switch it acknowledged
meanwhile is never undone by an older pointer: after any sequence of switches every worker serves the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from promokit.campaign.directory import Campaign, load_campaign, refresh_problem
from promokit.campaign.versions import LIVE, UnknownVersion, live_pointer, point_live, version_names
from promokit.data.errors import DataError
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.health import UNAVAILABLE

#: How often a worker reads ``live.json``.
WATCH_SECONDS = 1.0
#: Switches and refusals a worker remembers for its status.
KEEP = 20
#: Errors that mean a version's files cannot be served.
UNREADABLE = (DataError, OSError, ValueError, KeyError)

log = logging.getLogger("promokit.serve")


class LiveVersion:
    """The version one worker serves, its rule, and the switches it made and refused."""

    def __init__(self, campaign: Campaign, explore: float | None = None):
        self.rule = DecisionRule(campaign)
        self.explore = explore  # the service's replacement of each version's exploration share
        self.since = time.time()
        self.switches: list[dict] = []  # the last KEEP
        self.refused: list[dict] = []  # the last KEEP
        self.counts = {"switches": 0, "refused": 0}
        self.seen: tuple[str | None, int | None] | None = None  # the pointer (version, seq) last acted on
        self._switching = asyncio.Lock()
        self._poke = asyncio.Event()  # SIGHUP: read live.json now

    @property
    def campaign(self) -> Campaign:
        return self.rule.campaign

    @property
    def version(self) -> str:
        return self.campaign.config.model_version

    def pointer(self) -> tuple[str | None, int | None]:
        """The version ``live.json`` names now, and the switch's number."""
        return live_pointer(self.campaign.path)

    def prepare(self, version: str) -> DecisionRule:
        """The rule of ``version``, loaded and checked against the live one (raises :data:`UNREADABLE`)."""
        campaign = load_campaign(self.campaign.path, self.explore, version=version)
        problem = refresh_problem(self.campaign, campaign)
        if problem:
            raise DataError(problem)
        return DecisionRule(campaign)

    def commit(self, rule: DecisionRule, how: str) -> dict:
        """Serve ``rule`` from now on; returns the switch as the status reports it."""
        rule.pacer.carry(self.rule.pacer)
        switch = {"time": time.time(), "previous": self.version, "version": rule.campaign.config.model_version,
                  "how": how}
        self.rule, self.since = rule, switch["time"]
        self.switches = [*self.switches, switch][-KEEP:]
        self.counts["switches"] += 1
        log.warning("campaign switched from version %s to %s (%s)", switch["previous"], switch["version"], how)
        return switch

    def refuse(self, version: str, error: BaseException, how: str) -> dict:
        refusal = {"time": time.time(), "version": version, "how": how, "reason": str(error) or type(error).__name__}
        self.refused = [*self.refused, refusal][-KEEP:]
        self.counts["refused"] += 1
        log.warning("campaign version %s refused (%s), still serving %s: %s", version, how, self.version,
                    refusal["reason"])
        return refusal

    async def switch(self, version: str | None, how: str, run, set_cap) -> dict:
        """Serve ``version`` (None: the newest built) from now on and point ``live.json`` at it, even when it is
        live here already (another worker may serve another): loaded and checked by ``run`` (a function run off
        the event loop), the pointer written, the ledger's cap set to the version's (awaiting ``set_cap`` of its
        minor units), then the rule replaced. A version that cannot serve raises :class:`DataError`
        (:class:`UnknownVersion` for a name the directory does not hold) and nothing changes. Returns the switch
        with the pointer's ``seq``, ``switched`` false when ``version`` was live here already."""
        async with self._switching:
            version = version or (await run(version_names, self.campaign.path))[-1]
            rule = self.rule if version == self.version else await self._prepare(version, how, run)
            try:
                seq = await run(point_live, self.campaign.path, version)
            except OSError as exc:
                raise DataError(f"cannot point {LIVE} at version {version!r}: {exc}") from None
            await set_cap(rule.config.cap_minor)  # another worker may have set another version's
            self.seen = version, seq
            if rule is self.rule:
                return {"switched": False, "version": version, "previous": version, "time": time.time(),
                        "how": how, "seq": seq}
            return {"switched": True, **self.commit(rule, how), "seq": seq}

    async def _prepare(self, version: str, how: str, run) -> DecisionRule:
        try:
            return await run(self.prepare, version)
        except UnknownVersion:
            raise
        except UNREADABLE as exc:
            self.refuse(version, exc, how)
            if isinstance(exc, DataError):
                raise
            raise DataError(f"version {version!r} cannot be read: {exc}") from None

    async def follow(self, run, set_cap, watch_seconds: float) -> None:
        """Switch to the version ``live.json`` names whenever the pointer moves (read every ``watch_seconds``, never
        when that is 0, and at once after :meth:`poke`). A version refused is tried again only when the pointer
        moves or a signal asks; one the ledger could not take (its cap) at the next reading."""
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poke.wait(), watch_seconds if watch_seconds > 0 else None)
            how = "signal" if self._poke.is_set() else "pointer"
            self._poke.clear()
            try:
                if how == "signal" or await run(self.pointer) != self.seen:
                    await self._follow(how, run, set_cap)
            except (*UNREADABLE, *UNAVAILABLE):  # no version named, refused (logged, in the status), or the
                pass                               # ledger unable to take its cap: the pointer is read again later
            except Exception:  # noqa: BLE001 - a follower that died would stop every later refresh in silence
                log.exception("campaign version: following live.json failed; still serving %s", self.version)

    async def _follow(self, how: str, run, set_cap) -> None:
        async with self._switching:  # read again with this worker's switches held off: never an older pointer
            pointer = await run(self.pointer)
            version = pointer[0]
            if version is None or (pointer == self.seen and how != "signal"):
                return
            if version != self.version:
                try:
                    rule = await self._prepare(version, how, run)
                except DataError:
                    self.seen = pointer
                    raise
                if rule.config.cap_minor != self.campaign.config.cap_minor:
                    await set_cap(rule.config.cap_minor)
                self.commit(rule, how)
            self.seen = pointer

    def poke(self) -> None:
        """Read ``live.json`` now (SIGHUP)."""
        self._poke.set()

    def status(self) -> dict:
        """What the status reports of the campaign's versions (beside the live one's ``model_version``)."""
        return {"folder": str(self.campaign.folder), "live_since": self.since,
                **self.counts, "last_switch": self.switches[-1] if self.switches else None,
                "last_refused": self.refused[-1] if self.refused else None}

