"""A home-and-office MCP server with fifty tools, built with the official
Python SDK, for `cargo xtask bench-mcp`: enough distinct, plausible tools
that a bridge injecting every one of them into each chat request pays for
it in prompt tokens, while one that discovers what fits offers a few.

Usage: office_server.py            (stdio)
Every tool answers with a short confirmation naming its arguments.
"""

import inspect

from mcp.server.mcpserver import MCPServer

server = MCPServer("office")

# name, description, parameters: (name, type, default or inspect.Parameter.empty)
REQUIRED = inspect.Parameter.empty
TOOLS = [
    ("get_forecast", "Get the weather forecast for a city: temperature, chance of rain and wind, for today or the next days.",
     [("city", str, REQUIRED), ("days", int, 1)]),
    ("get_air_quality", "Get the outdoor air quality index and pollen levels for a city.",
     [("city", str, REQUIRED)]),
    ("set_light", "Switch the lights in a room of the house on or off.",
     [("room", str, REQUIRED), ("on", bool, REQUIRED)]),
    ("dim_light", "Set the brightness of the lights in a room, in percent.",
     [("room", str, REQUIRED), ("percent", int, REQUIRED)]),
    ("set_thermostat", "Set the target temperature of the heating in a room, in degrees Celsius.",
     [("room", str, REQUIRED), ("celsius", float, REQUIRED)]),
    ("get_room_temperature", "Read the current temperature and humidity sensor of a room.",
     [("room", str, REQUIRED)]),
    ("lock_door", "Lock or unlock a door of the house: front, back or garage.",
     [("door", str, REQUIRED), ("locked", bool, True)]),
    ("open_garage", "Open or close the garage door.",
     [("open", bool, REQUIRED)]),
    ("start_vacuum", "Start the robot vacuum cleaner in one room or the whole flat.",
     [("room", str, "all")]),
    ("start_washing_machine", "Start the washing machine with a programme and temperature.",
     [("programme", str, REQUIRED), ("celsius", int, 40)]),
    ("start_dishwasher", "Start the dishwasher, optionally delayed by a number of hours.",
     [("delay_hours", int, 0)]),
    ("preheat_oven", "Preheat the oven to a temperature in degrees Celsius.",
     [("celsius", int, REQUIRED)]),
    ("start_timer", "Start a kitchen countdown timer for a number of minutes.",
     [("minutes", int, REQUIRED)]),
    ("set_alarm", "Set a wake-up alarm at a time of day (HH:MM).",
     [("time", str, REQUIRED), ("label", str, "")]),
    ("play_music", "Play a song, album, artist or playlist on the speakers of a room.",
     [("query", str, REQUIRED), ("room", str, "living room")]),
    ("set_volume", "Set the speaker volume of a room, in percent.",
     [("room", str, REQUIRED), ("percent", int, REQUIRED)]),
    ("turn_on_tv", "Turn the television on or off and pick an input or channel.",
     [("on", bool, REQUIRED), ("channel", str, "")]),
    ("close_blinds", "Open or close the window blinds of a room, in percent closed.",
     [("room", str, REQUIRED), ("percent_closed", int, 100)]),
    ("water_garden", "Run the garden irrigation for a number of minutes in a zone.",
     [("zone", str, REQUIRED), ("minutes", int, 10)]),
    ("check_energy_usage", "Report the household electricity usage for a day, in kWh, by appliance.",
     [("date", str, REQUIRED)]),
    ("get_solar_output", "Report what the rooftop solar panels produce now and today.",
     []),
    ("charge_car", "Start or stop charging the electric car at the wallbox, up to a percent.",
     [("start", bool, REQUIRED), ("limit_percent", int, 80)]),
    ("view_camera", "Take a snapshot from a security camera: door, garden or driveway.",
     [("camera", str, REQUIRED)]),
    ("arm_alarm_system", "Arm or disarm the burglar alarm system in home or away mode.",
     [("mode", str, REQUIRED)]),
    ("add_shopping_item", "Add an item to the shared shopping list.",
     [("item", str, REQUIRED), ("quantity", int, 1)]),
    ("list_shopping_items", "Show what is on the shared shopping list.",
     []),
    ("order_groceries", "Order the items on the shopping list from the grocery delivery service.",
     [("delivery_slot", str, REQUIRED)]),
    ("find_recipe", "Find a cooking recipe by dish name or by the ingredients at hand.",
     [("query", str, REQUIRED), ("max_minutes", int, 60)]),
    ("add_calendar_event", "Add an event to the family or work calendar at a date and time.",
     [("title", str, REQUIRED), ("start", str, REQUIRED), ("minutes", int, 60)]),
    ("list_calendar_events", "List the calendar events of a day.",
     [("date", str, REQUIRED)]),
    ("book_meeting_room", "Book a meeting room in the office for a time slot and number of people.",
     [("start", str, REQUIRED), ("minutes", int, REQUIRED), ("people", int, 2)]),
    ("send_email", "Send an email to a recipient with a subject and body.",
     [("to", str, REQUIRED), ("subject", str, REQUIRED), ("body", str, REQUIRED)]),
    ("search_email", "Search the mailbox for messages matching words, a sender or a date.",
     [("query", str, REQUIRED)]),
    ("send_chat_message", "Post a message to a team chat channel.",
     [("channel", str, REQUIRED), ("text", str, REQUIRED)]),
    ("create_task", "Create a to-do task with a due date and an assignee.",
     [("title", str, REQUIRED), ("due", str, ""), ("assignee", str, "")]),
    ("complete_task", "Mark a to-do task as done.",
     [("task_id", str, REQUIRED)]),
    ("print_document", "Print a document on the office printer, in colour or black and white.",
     [("path", str, REQUIRED), ("copies", int, 1), ("colour", bool, False)]),
    ("scan_document", "Scan the pages on the office scanner to a PDF file.",
     [("name", str, REQUIRED)]),
    ("check_printer_status", "Report the office printer's paper, toner and error state.",
     []),
    ("reserve_desk", "Reserve a hot desk in the office for a day.",
     [("date", str, REQUIRED), ("floor", int, 1)]),
    ("request_leave", "Request days of annual leave from a start date.",
     [("start", str, REQUIRED), ("days", int, REQUIRED)]),
    ("log_work_hours", "Log hours worked on a project for a day.",
     [("project", str, REQUIRED), ("hours", float, REQUIRED), ("date", str, "")]),
    ("submit_expense", "Submit an expense claim with an amount, currency and reason.",
     [("amount", float, REQUIRED), ("currency", str, "EUR"), ("reason", str, REQUIRED)]),
    ("convert_currency", "Convert an amount of money between two currencies at today's rate.",
     [("amount", float, REQUIRED), ("source", str, REQUIRED), ("target", str, REQUIRED)]),
    ("get_train_times", "Find the next train departures between two stations.",
     [("origin", str, REQUIRED), ("destination", str, REQUIRED)]),
    ("get_traffic", "Report the traffic and travel time by car between two places.",
     [("origin", str, REQUIRED), ("destination", str, REQUIRED)]),
    ("track_parcel", "Track a parcel delivery by its tracking number.",
     [("tracking_number", str, REQUIRED)]),
    ("check_wifi", "Report the home wifi's connected devices and internet speed.",
     []),
    ("restart_router", "Restart the internet router.",
     []),
    ("feed_pet", "Release a portion of food from the automatic pet feeder.",
     [("portions", int, 1)]),
]


def make_tool(name, params):
    def tool(**kwargs):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(kwargs.items()))
        return f"{name} done ({shown})"

    tool.__name__ = name
    tool.__signature__ = inspect.Signature(
        [
            inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=t)
            for p, t, d in params
        ],
        return_annotation=str,
    )
    tool.__annotations__ = {p: t for p, t, _ in params} | {"return": str}
    return tool


assert len(TOOLS) == 50 and len({t[0] for t in TOOLS}) == 50
for tool_name, description, parameters in TOOLS:
    server.add_tool(make_tool(tool_name, parameters), name=tool_name, description=description)

if __name__ == "__main__":
    server.run("stdio")
