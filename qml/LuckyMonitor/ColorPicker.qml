pragma ComponentBehavior: Bound
import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// Colour for a debug primitive: a row of swatches plus r, g, b, a fields (0..1).
ColumnLayout {
    id: root
    readonly property real r: fr.value
    readonly property real g: fg.value
    readonly property real b: fb.value
    readonly property real a: fa.value
    readonly property var swatches: [
        [1.0, 0.25, 0.25], [1.0, 0.6, 0.1], [1.0, 0.9, 0.2], [0.3, 0.9, 0.35],
        [0.2, 0.85, 0.95], [0.3, 0.5, 1.0], [0.85, 0.4, 1.0], [1.0, 1.0, 1.0]
    ]

    function setColor(rgb) {
        fr.text = rgb[0].toFixed(2)
        fg.text = rgb[1].toFixed(2)
        fb.text = rgb[2].toFixed(2)
    }

    Layout.fillWidth: true
    spacing: 4

    RowLayout {
        Layout.fillWidth: true
        spacing: 6
        Label {
            text: "colour"
            color: Theme.dim
            Layout.preferredWidth: 80
        }
        Repeater {
            model: root.swatches
            delegate: Rectangle {
                id: swatch
                required property var modelData
                readonly property bool current: Math.abs(root.r - modelData[0]) < 0.01
                                                && Math.abs(root.g - modelData[1]) < 0.01
                                                && Math.abs(root.b - modelData[2]) < 0.01
                Layout.preferredWidth: 20
                Layout.preferredHeight: 20
                radius: 4
                color: Qt.rgba(modelData[0], modelData[1], modelData[2], 1)
                border.width: current ? 2 : 1
                border.color: current ? Theme.text : Theme.line
                TapHandler { onTapped: root.setColor(swatch.modelData) }
            }
        }
        Item { Layout.fillWidth: true }
        Rectangle {
            objectName: "colourPreview"
            Layout.preferredWidth: 34
            Layout.preferredHeight: 20
            radius: 4
            border.width: 1
            border.color: Theme.line
            color: Qt.rgba(root.r, root.g, root.b, root.a)
        }
    }
    RowLayout {
        Layout.fillWidth: true
        spacing: 4
        Item { Layout.preferredWidth: 80 }
        Label { text: "r"; color: Theme.dim; font.pixelSize: Theme.small }
        NumField { id: fr; text: "1.00"; minValue: 0; maxValue: 1; fallback: 1 }
        Label { text: "g"; color: Theme.dim; font.pixelSize: Theme.small }
        NumField { id: fg; text: "0.25"; minValue: 0; maxValue: 1 }
        Label { text: "b"; color: Theme.dim; font.pixelSize: Theme.small }
        NumField { id: fb; text: "0.25"; minValue: 0; maxValue: 1 }
        Label { text: "a"; color: Theme.dim; font.pixelSize: Theme.small }
        NumField { id: fa; text: "1.00"; minValue: 0; maxValue: 1; fallback: 1 }
    }
}
