"""The noderesource controller and its calculation: batch and mid resources of every node.

:mod:`.views` (inputs), :mod:`.batch` and :mod:`.mid` (the formulas), :mod:`.calculator`
(strategy, enable and degrade decisions, then the formulas) and :mod:`.sync` (when to
write) do no I/O and are shared with ``koord-manager explain-node``; :mod:`.controller`
feeds them from informers and writes node status.
"""
