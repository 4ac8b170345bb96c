"""A keyring backend for the tests: its entries in one JSON file. A process is pointed at it by
keyring's own configuration, as a user points keyring at any backend:
PYTHON_KEYRING_BACKEND=tests.index.file_keyring.FileKeyring and KEYRING_PROPERTY_PATH=FILE (keyring
sets each KEYRING_PROPERTY_<NAME> on the backend it loads). `python -m keyring set SERVICE USER`
stores an entry (the password read from standard input); a file that is not a keyring's is a
KeyringError, as a locked or broken keyring is."""

from __future__ import annotations

import json
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.credentials import Credential, SimpleCredential
from keyring.errors import KeyringError, PasswordDeleteError

BACKEND = f"{__name__}.FileKeyring"


class FileKeyring(KeyringBackend):
    """{service: {username: password}} in the file at `path`."""

    priority = 0.1
    path = ""

    def _entries(self) -> dict[str, dict[str, str]]:
        file = Path(self.path)
        if not file.exists():
            return {}
        try:
            entries: dict[str, dict[str, str]] = json.loads(file.read_text())
        except (OSError, ValueError) as error:
            message = f"{file} is not a keyring file: {error}"
            raise KeyringError(message) from error
        return entries

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(service, {}).get(username)

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries.setdefault(service, {})[username] = password
        Path(self.path).write_text(json.dumps(entries))

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        if entries.get(service, {}).pop(username, None) is None:
            raise PasswordDeleteError(username)
        Path(self.path).write_text(json.dumps(entries))

    def get_credential(self, service: str, username: str | None) -> Credential | None:
        """As the macOS and Windows backends: without a username, the service's one entry."""
        users = self._entries().get(service, {})
        if username is None and len(users) == 1:
            ((username, password),) = users.items()
            return SimpleCredential(username, password)
        return super().get_credential(service, username)
