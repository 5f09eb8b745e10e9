import QtQuick
import QtQuick.Controls
import LuckyMonitor.Backend

// Root of each LuckyMonitor view: a Pane carrying the dark palette every
// control inside inherits, whatever the application palette is. The roles are
// those lucky_monitor.ui.theme gives the widgets' QPalette.
Pane {
    padding: 0
    font.pixelSize: Theme.base
    palette.window: Palette.window
    palette.windowText: Palette.text
    palette.base: Palette.surface
    palette.alternateBase: Palette.alternateBase
    palette.text: Palette.text
    palette.button: Palette.control
    palette.buttonText: Palette.text
    palette.brightText: Palette.brightText
    palette.highlight: Palette.highlight
    palette.highlightedText: Palette.brightText
    palette.light: Palette.light
    palette.midlight: Palette.midlight
    palette.mid: Palette.mid
    palette.dark: Palette.dark
    palette.shadow: Palette.shadow
    palette.placeholderText: Palette.dim
    palette.toolTipBase: Palette.control
    palette.toolTipText: Palette.text
    palette.link: Palette.accent
    palette.disabled.text: Palette.dim
    palette.disabled.windowText: Palette.dim
    palette.disabled.buttonText: Palette.dim
    palette.disabled.highlight: Palette.disabledHighlight
    palette.disabled.button: Palette.surface
}
