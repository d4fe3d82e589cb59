"""Repairs of topic metadata and migrations, as plans: each recipe drafts its changes,
and the write spine (:mod:`pulsarctl_py.plans`) saves, applies and undoes them."""
