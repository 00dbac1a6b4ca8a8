"""Typed models of every Koordinator CRD and of the Kubernetes types they embed.

One module per upstream API group: :mod:`.slo` (NodeSLO, NodeMetric), :mod:`.config`
(ClusterColocationProfile), :mod:`.scheduling` (Reservation, PodMigrationJob, Device,
ClusterNetworkTopology, ScheduleExplanation), :mod:`.quota` (ElasticQuotaProfile), :mod:`.sigs`
(ElasticQuota, PodGroup), :mod:`.analysis` (Recommendation) and :mod:`.topology`
(NodeResourceTopology v1alpha1/v1alpha2). :mod:`.registry` lists the CRDs (group, version,
kind, scope, names, subresources, printer columns) and maps apiVersion/kind to a model.
"""
