import pytest
from django.core.management.base import CommandError

from srifty_web.commands import owner_for_command

pytestmark = pytest.mark.django_db


def test_it_finds_the_user_named_by_user(user, staff):
    assert owner_for_command("alice") == user


def test_it_acts_as_the_first_superuser_when_no_user_is_named(staff, django_user_model):
    django_user_model.objects.create_superuser(username="second-root", password="root-pass-456")
    assert owner_for_command(None) == staff
    assert owner_for_command("") == staff


def test_it_names_a_user_that_does_not_exist():
    with pytest.raises(CommandError, match="no user 'nobody'"):
        owner_for_command("nobody")


def test_it_asks_for_user_when_there_is_no_superuser(user):
    with pytest.raises(CommandError, match="no superuser; pass --user"):
        owner_for_command(None)
