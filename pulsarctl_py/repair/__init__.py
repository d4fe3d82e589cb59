"""Repairs of topic metadata, as plans: drafted, reviewed, applied with compare-and-set,
undone from a backup (see :mod:`pulsarctl_py.repair.plan`)."""
