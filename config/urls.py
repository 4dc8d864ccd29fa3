from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from accounts.oidc import sso_urls
from config.api import NotFoundView
from config.api_root import ApiRootView
from scheduler import agent_install, cli_install, health
from scheduler.prom import metrics_view
from web.views import AdminLoginView, admin_password_change

api_v1 = [
    path("", ApiRootView.as_view(), name="api-root"),
    path("", include("accounts.api.urls")),
    path("", include("budgets.api.urls")),
    path("", include("scheduler.api.urls")),
]

agent = [
    path("install.sh", agent_install.install_script, name="agent-install-script"),
    path("join", agent_install.join, name="agent-join"),
    path(agent_install.WHEEL_NAME, agent_install.agent_wheel, name="agent-wheel"),
    path("fairway-agent.whl", agent_install.agent_wheel),
]

cli = [
    path("install.sh", cli_install.install_script, name="cli-install-script"),
    path(cli_install.WHEEL_NAME, cli_install.cli_wheel, name="cli-wheel"),
    path("fairway-cli.whl", cli_install.cli_wheel),
]


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico whatever a page says: send them to the static icon (resolved
    per request, so the hashed name of the production storage is found)."""
    return HttpResponseRedirect(static("fairway/favicon.svg"))


handler404 = "web.views.not_found"  # the site's page naming what was not found (tryout49); the API answers JSON
handler500 = "config.middleware.server_error"  # a database failure in a middleware: 503, not 500

urlpatterns = [
    # the admin's log-in page with the web's login throttles (auth47: its own had none)
    path("admin/login/", AdminLoginView.as_view(), name="admin-login"),
    # the admin's own password change, saying which API tokens it ended (docs/deploy.md, "API
    # tokens: a password change")
    path("admin/password_change/", admin_password_change, name="admin-password-change"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^api/", NotFoundView.as_view(), name="api-not-found"),  # one error format, even for 404
    path("agent/", include(agent)),
    path("cli/", include(cli)),
    path("metrics", metrics_view, name="prometheus-metrics"),
    path("oidc/", include(sso_urls)),  # single sign-on; 404 unless FAIRWAY_OIDC_CLIENT_ID is set
    # Browsers ask for /favicon.ico whatever the page says; answer with the page's icon.
    path("favicon.ico", favicon, name="favicon"),
    path("livez", health.livez, name="livez"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("web.urls")),
]
