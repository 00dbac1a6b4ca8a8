"""The noderesource controller and its plug-ins: batch, mid and device resources of every node.

:mod:`.views` (inputs), :mod:`.batch` and :mod:`.mid` (the formulas), :mod:`.calculator`
(strategy, enable and degrade decisions, then the formulas) and :mod:`.sync` (when to
write) do no I/O and are shared with ``koord-manager explain-node``; :mod:`.devices`
(GPUDeviceResource, RDMADeviceResource: resources and GPU labels from the node's Device
object) does no I/O either; :mod:`.plugins` names the plug-ins ``--noderesource-plugins``
selects; :mod:`.controller` feeds them from informers and writes node status and labels.
"""
