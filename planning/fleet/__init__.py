"""The fleet's decision machine: one pure, deterministic state machine for `fleet/<policy>` (ADR 0023).

`planning.fleet.machine.FleetMachine` takes the fleet's state and one event at a time (a message from
the inbox or the result of the command it asked for) and answers with the next command to carry out.
The fleet workflow (`workflows/fleet.py`), `noderoll plan` and the ETA (`planning.views.simulate`) run
this same machine: the workflow carries its commands out with Temporal, the simulation answers them
with simulated listings and window results.
"""
