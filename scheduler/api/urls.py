from django.urls import path
from rest_framework.routers import DefaultRouter

from scheduler.api.hosts import HostViewSet, MetricsView
from scheduler.api.pyramid import PyramidView
from scheduler.api.schema import describe_workload_views
from scheduler.api.views import ArrayGroupViewSet, ClusterViewSet, NotificationSettingsView, WorkloadViewSet

describe_workload_views(WorkloadViewSet)

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("hosts", HostViewSet, basename="host")
router.register("groups", ArrayGroupViewSet, basename="group")

urlpatterns = [
    *router.urls,
    path("metrics/", MetricsView.as_view(), name="api-metrics"),
    path("notifications/", NotificationSettingsView.as_view(), name="api-notifications"),
    path("metrics/pyramid/", PyramidView.as_view(), name="api-metrics-pyramid"),
]
