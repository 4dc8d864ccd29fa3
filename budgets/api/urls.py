from django.urls import path
from rest_framework.routers import DefaultRouter

from budgets.api.views import BudgetViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("budgets", BudgetViewSet, basename="budget")

urlpatterns = [
    # the statement as a file name, without the router's trailing slash
    path("budgets/<int:pk>/statement.csv", BudgetViewSet.as_view({"get": "statement"}), name="budget-statement-csv"),
    *router.urls,
]
