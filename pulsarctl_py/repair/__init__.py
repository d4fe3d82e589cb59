"""Repairs of topic metadata and migrations, as plans: each recipe drafts its changes,
and the write spine (:mod:`pulsarctl_py.plans`) saves, applies and undoes them.

One recipe per module, over :mod:`.topic_state` (a topic, its cursors and ledgers as the
draft holds them): :mod:`.missing_ledgers` (with :mod:`.recreate`), :mod:`.cursors`,
:mod:`.compaction_pointer`, :mod:`.shadow`, :mod:`.orphans`, :mod:`.restore_metadata`,
:mod:`.migrate`; :mod:`.from_verify` drafts the ones a verify report asks for."""
