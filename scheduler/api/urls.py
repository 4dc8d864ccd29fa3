from rest_framework.routers import DefaultRouter

from scheduler.api.views import ClusterViewSet, WorkloadViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = router.urls
