"""A small home-automation MCP server built with the official Python SDK,
for the daemon's end-to-end tests: tools with real schemas that discovery
must tell apart, and one that makes the server die mid-call.

Usage: home_server.py            (stdio)
The environment variable HOME_SERVER_PIDFILE, when set, names a file the
server appends its process id to when it starts.
"""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("home")


@server.tool(
    description="Get the weather forecast for a city: temperature, chance of rain and wind, "
    "for today or the next days."
)
def get_forecast(city: str, days: int = 1) -> str:
    return f"Forecast for {city}, {days} day(s): 14 C, rain 80 percent, wind 20 km/h"


@server.tool(description="Switch the lights in a room of the house on or off.")
def set_light(room: str, on: bool) -> str:
    return f"light in {room} is now {'on' if on else 'off'}"


@server.tool(description="Start a kitchen countdown timer for a number of minutes.")
def start_timer(minutes: int) -> str:
    return f"timer set for {minutes} minutes"


@server.tool(description="Reboot the home automation hub device for maintenance.")
def reboot_hub() -> str:
    # Dies in the middle of the call, as a crashing server does.
    os._exit(3)


if __name__ == "__main__":
    pidfile = os.environ.get("HOME_SERVER_PIDFILE")
    if pidfile:
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run("stdio")
