"""What the host's pump costs after a command where nothing can follow (an audio append in an
idle turn-based session), against the check that lets the host skip it (``pump_idle``):

    .venv/bin/python scripts/pump_cost.py

Prints µs per call (20,000 calls each)."""

import timeit, base64, itertools
from duplex_es.domain import OpenSession, SessionPatch, UpdateSession, AppendAudio, decide, evolve
from duplex_es.domain.judge import pump_idle
from duplex_es.server.core import SessionCore
from duplex_es.server.host import new_id, now_ms
core = SessionCore("sess_x", new_id=new_id, clock=now_ms)
st = core.state
for ev in decide(st, OpenSession(session_id="sess_x", model="m")):
    st = evolve(st, st.seq + 1, ev)
for ev in decide(st, UpdateSession(patch=SessionPatch(turn_detection=None))):
    st = evolve(st, st.seq + 1, ev)
core.state = st
def pump():
    p = core.pump(); return core.plan(p, None)
n = 20000
t_pump = timeit.timeit(pump, number=n) / n * 1e6
t_idle = timeit.timeit(lambda: core.pump_idle(), number=n) / n * 1e6
print(f"pump (ids + plan) on an idle turn-based session: {t_pump:.1f} us; pump_idle check: {t_idle:.2f} us; idle={core.pump_idle()}")
