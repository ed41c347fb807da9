"""The package version, in a module that imports nothing.

The protocol core reports the version to brokers (ApiVersions' client software version), and
the build reads it from here without importing the package.
"""

__version__ = "0.1.0.dev0"
