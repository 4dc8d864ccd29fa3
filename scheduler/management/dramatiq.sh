#!/bin/sh
# What `manage.py rundramatiq` execs in place of dramatiq's own script (its arguments unchanged):
# dramatiq's command line with Fairway's log format (scheduler/dramatiq_main.py), run by the
# Python that ran manage.py (_FAIRWAY_DRAMATIQ_PYTHON, set by scheduler's rundramatiq).
exec "${_FAIRWAY_DRAMATIQ_PYTHON:?set by manage.py rundramatiq}" -m scheduler.dramatiq_main "$@"
