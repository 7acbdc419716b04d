"""Reading checkpoint files: never running code from them, telling a damaged file from a good one."""
