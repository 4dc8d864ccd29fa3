from django.urls import path
from rest_framework.routers import DefaultRouter

from accounts.api.views import LoginView, LogoutView, MeView, TokenViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tokens", TokenViewSet, basename="token")

urlpatterns = [
    path("auth/login/", LoginView.as_view(), name="api-login"),
    path("auth/logout/", LogoutView.as_view(), name="api-logout"),
    path("me/", MeView.as_view(), name="api-me"),
    *router.urls,
]
