from rest_framework.routers import DefaultRouter

from budgets.api.views import BudgetViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("budgets", BudgetViewSet, basename="budget")

urlpatterns = router.urls
