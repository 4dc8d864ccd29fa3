from django.contrib.auth import views as auth_views
from django.urls import path

from web import views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),  # throttled like the API's login
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.dashboard, name="web-dashboard"),
    path("submit/", views.submit, name="web-submit"),
    path("workloads/", views.workloads, name="web-workloads"),
    path("workloads/bulk/", views.workloads_bulk, name="web-workloads-bulk"),
    path("workloads/<int:pk>/", views.workload, name="web-workload"),
    path("workloads/<int:pk>/cancel/", views.cancel, name="web-cancel"),
    path("workloads/<int:pk>/update/", views.update, name="web-update"),
    path("workloads/<int:pk>/hold/", views.hold, {"verb": "hold"}, name="web-hold"),
    path("workloads/<int:pk>/release/", views.hold, {"verb": "release"}, name="web-release"),
    path("workloads/<int:pk>/logs/", views.workload_logs, name="web-workload-logs"),
    path("groups/<int:pk>/cancel/", views.cancel_group, name="web-cancel-group"),
    path("groups/<int:pk>/hold/", views.hold_group, {"verb": "hold"}, name="web-hold-group"),
    path("groups/<int:pk>/release/", views.hold_group, {"verb": "release"}, name="web-release-group"),
    path("notifications/", views.notifications, name="web-notifications"),
    path("budgets/", views.budgets, name="web-budgets"),
    path("clusters/", views.clusters, name="web-clusters"),
    path("clusters/<slug:name>/", views.clusters, name="web-cluster"),
    path("hosts/<str:name>/<str:verb>/", views.host_action, name="web-host-action"),
    path("metrics/", views.metrics, name="web-metrics"),
    path("tokens/", views.tokens, name="web-tokens"),
]
