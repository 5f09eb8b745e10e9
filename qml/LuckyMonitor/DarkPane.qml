import QtQuick
import QtQuick.Controls

// Root of each LuckyMonitor view: a Pane carrying the dark palette every
// control inside inherits, whatever the application palette is.
Pane {
    padding: 0
    font.pixelSize: Theme.base
    palette.window: Theme.window
    palette.windowText: Theme.text
    palette.base: Theme.surface
    palette.alternateBase: Theme.control
    palette.text: Theme.text
    palette.button: Theme.control
    palette.buttonText: Theme.text
    palette.brightText: "#ffffff"
    palette.highlight: "#2f6fbf"
    palette.highlightedText: "#ffffff"
    palette.light: "#5a616b"
    palette.midlight: "#464c54"
    palette.mid: "#2a2d33"
    palette.dark: "#15171a"
    palette.shadow: "#000000"
    palette.placeholderText: Theme.dim
    palette.toolTipBase: Theme.control
    palette.toolTipText: Theme.text
    palette.link: Theme.accent
    palette.disabled.text: Theme.dim
    palette.disabled.windowText: Theme.dim
    palette.disabled.buttonText: Theme.dim
    palette.disabled.highlight: "#3a4a5e"
    palette.disabled.button: Theme.surface
}
